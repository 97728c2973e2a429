"""The file to give ``spark-submit``: runs the ``cdcflow`` command line with the arguments that
follow it, in the driver ``spark-submit`` starts::

    spark-submit --master … --packages "$(cdcflow jars --print packages)" \\
        "$(python -c 'import cdcflow.submit as s; print(s.__file__)')" run pipeline.yaml

Importing it does nothing; ``docs/deploy.md`` has the whole command.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    """Run the command line on ``sys.argv`` (what follows this file on the ``spark-submit``
    command line)."""
    from cdcflow.cli.main import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    # Run as a file, its own folder comes first on the module path, and cdcflow's modules there
    # (the types package, …) would shadow the standard library's.
    here = os.path.realpath(os.path.dirname(__file__))
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    sys.exit(main())
