"""The `ferromq` command: name server, broker, both in one process, and store tools."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import Any

from ferromq import __version__
from ferromq.broker import Broker, load_broker_config
from ferromq.broker.config import ConfigError
from ferromq.namesrv import NameServer
from ferromq.store import MessageStore

logger = logging.getLogger("ferromq")


async def _until_signalled() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    logger.info("shutting down")


def _broker_config(args: argparse.Namespace, **extra: Any) -> Any:
    overrides: dict[str, Any] = dict(extra)
    if getattr(args, "listen_port", None):
        overrides["listen_port"] = args.listen_port
    if getattr(args, "store", None):
        overrides["store_path_root_dir"] = os.path.expanduser(args.store)
    if getattr(args, "namesrv", None):
        overrides["namesrv_addr"] = args.namesrv
    return load_broker_config(args.config, **overrides)


async def _run_namesrv(args: argparse.Namespace) -> None:
    ns = NameServer(args.host, args.port)
    await ns.start()
    print(f"ferromq name server listening on {args.host}:{ns.port}", flush=True)
    try:
        await _until_signalled()
    finally:
        await ns.stop()


async def _run_broker(args: argparse.Namespace) -> None:
    cfg = _broker_config(args)
    broker = Broker(cfg, args.host)
    await broker.start()
    print(
        f"ferromq broker {broker.config.broker_name} listening on {args.host}:{broker.port}, "
        f"store {broker.config.store_path_root_dir}, name servers {broker.config.namesrv_addr}",
        flush=True,
    )
    try:
        await _until_signalled()
    finally:
        await broker.stop()


async def _run_serve(args: argparse.Namespace) -> None:
    ns = NameServer(args.host, args.namesrv_port)
    await ns.start()
    namesrv = f"127.0.0.1:{ns.port}"
    cfg = _broker_config(args, namesrv_addr=namesrv)
    broker = Broker(cfg, args.host)
    try:
        await broker.start()
        print(
            f"ferromq serving: name server {args.host}:{ns.port}, broker {broker.config.broker_name} "
            f"on {args.host}:{broker.port}, store {broker.config.store_path_root_dir}",
            flush=True,
        )
        await _until_signalled()
    finally:
        await broker.stop()
        await ns.stop()


def _store_info(args: argparse.Namespace) -> int:
    with MessageStore.open_read_only(args.path) as store:
        print(f"store {args.path}")
        print(f"  commitlog  min={store.min_physical_offset}  max={store.max_physical_offset}")
        queues = store.queues()
        print(f"  {len(queues)} consume queues")
        for topic, queue_id, lo, hi in queues:
            print(f"    {topic:<40} {queue_id:>4}  min={lo:<10} max={hi}")
    return 0


def _add_broker_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-c", "--config", help="broker.conf (Java properties with RocketMQ's keys)")
    p.add_argument("-p", "--listen-port", type=int, help="overrides listenPort")
    p.add_argument("--store", help="overrides storePathRootDir")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ferromq", description="An Apache RocketMQ 4.x compatible broker.")
    parser.add_argument("--version", action="version", version=f"ferromq {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", help="a name server and a broker in one process")
    _add_broker_args(p)
    p.add_argument("--namesrv-port", type=int, default=9876)
    p.set_defaults(run=_run_serve)

    p = sub.add_parser("namesrv", help="a name server")
    p.add_argument("--port", type=int, default=9876)
    p.add_argument("--host", default="127.0.0.1")
    p.set_defaults(run=_run_namesrv)

    p = sub.add_parser("broker", help="a broker registering with name servers")
    _add_broker_args(p)
    p.add_argument("-n", "--namesrv", help="name server addresses, host:port;host:port")
    p.set_defaults(run=_run_broker)

    p = sub.add_parser("store-info", help="list the consume queues of a store directory (read-only)")
    p.add_argument("path")
    p.set_defaults(func=_store_info)

    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if hasattr(args, "func"):
        return int(args.func(args))
    try:
        asyncio.run(args.run(args))
    except ConfigError as e:
        print(f"ferromq: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
