"""The `ferromq` command."""

from __future__ import annotations

import argparse
import sys

from ferromq import __version__
from ferromq.store import MessageStore


def _store_info(args: argparse.Namespace) -> int:
    with MessageStore.open_read_only(args.path) as store:
        print(f"store {args.path}")
        print(f"  commitlog  min={store.min_physical_offset}  max={store.max_physical_offset}")
        queues = store.queues()
        print(f"  {len(queues)} consume queues")
        for topic, queue_id, lo, hi in queues:
            print(f"    {topic:<40} {queue_id:>4}  min={lo:<10} max={hi}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ferromq", description=__doc__)
    parser.add_argument("--version", action="version", version=f"ferromq {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("store-info", help="list the consume queues of a store directory (read-only)")
    info.add_argument("path")
    info.set_defaults(func=_store_info)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
