"""``python -m cdcflow.testing.services NAME start|stop|status --home DIR``: one server by hand
(``kafka``, ``postgres``, ``rest``, ``spark-connect``); ``start`` prints its address."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cdcflow.errors import CdcflowError


def main(argv: list[str] | None = None) -> int:
    """Start, stop or describe one server."""
    parser = argparse.ArgumentParser(prog="python -m cdcflow.testing.services")
    parser.add_argument("name", choices=["kafka", "postgres", "rest", "spark-connect"])
    parser.add_argument("command", choices=["start", "stop", "status"])
    parser.add_argument("--home", type=Path, required=True, help="the server's own folder")
    args = parser.parse_args(argv)
    try:
        if args.name == "kafka":
            from cdcflow.testing.services.kafka import KafkaBroker

            server: object = KafkaBroker(args.home)
        elif args.name == "postgres":
            from cdcflow.testing.services.postgres import Postgres

            server = Postgres(args.home)
        elif args.name == "spark-connect":
            from cdcflow.testing.services.spark_connect import SparkConnectServer

            server = SparkConnectServer(args.home)
        else:
            from cdcflow.testing.services.rest import RestCatalog

            server = RestCatalog(args.home)
        if args.command == "start":
            print(server.start())  # type: ignore[attr-defined]
        elif args.command == "stop":
            print(server.stop())  # type: ignore[attr-defined]
        else:
            print(json.dumps(server.process.state, indent=1))  # type: ignore[attr-defined]
    except CdcflowError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
