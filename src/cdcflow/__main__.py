"""``python -m cdcflow``."""

import sys

from cdcflow.cli.main import main

sys.exit(main())
