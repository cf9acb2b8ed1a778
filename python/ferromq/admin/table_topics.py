"""`ferromq admin table-topics`: the table topics as the brokers report them, or read from the
tables' own files (--store/--path)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from ferromq.admin.output import UsageError, local_time, make_table
from ferromq.admin.targets import broker_addrs
from ferromq.client import Admin
from ferromq.errors import TopicNotExistError


def _describe_tables(store: str | None, path: str | None, topic: str | None) -> list[dict[str, Any]]:
    """Each topic table's state, read from its files (and the lag from the store's, read-only)."""
    # deltalake is needed by this command only.
    from ferromq import _store
    from ferromq.tables.layout import is_uri, table_root
    from ferromq.tables.reader import describe, open_table

    root = table_root(store or "", path)
    if topic is not None:
        topics = [topic]
    elif is_uri(root):
        raise UsageError(f"name the --topic: the tables under {root} cannot be listed")
    else:
        topics = sorted(log.parent.name for log in Path(root).glob("*/_delta_log"))
    bounds: dict[str, dict[int, tuple[int, int]]] = {}
    if store is not None:
        view = _store.Store(store, read_only=True)
        try:
            for t, q, lo, hi in view.queues():
                bounds.setdefault(t, {})[q] = (lo, hi)
        finally:
            view.close()
    out = []
    for t in topics:
        table = open_table(root, t)
        if table is None:
            raise TopicNotExistError(f"topic {t} has no table under {root}")
        out.append({"topic": t, **describe(table, bounds.get(t, {}) if store is not None else None)})
    return out


async def show_table_topics(admin: Admin, args: argparse.Namespace) -> None:
    if args.store is None and args.path is None:
        await _brokers_table_topics(admin, args)
        return
    if args.broker_addr:
        raise UsageError("-b asks a broker, --store and --path read the files: give one or the other")
    tables = await asyncio.to_thread(_describe_tables, args.store, args.path, args.topic)
    t = make_table(
        "topic",
        "version",
        "files",
        "rows",
        "queues",
        "lag",
        "last commit",
        right=("version", "files", "rows", "queues", "lag"),
    )
    for d in tables:
        lag = d.get("lag")
        t.add_row(
            d["topic"],
            str(d["version"]),
            str(d["files"]),
            str(d["rows"]),
            str(len(d["queues"])),
            "-" if lag is None else str(lag),
            local_time(d["lastCommitTimestamp"] or 0),
        )
    args.out.result(tables, t, f"{len(tables)} table topic(s)")


async def _brokers_table_topics(admin: Admin, args: argparse.Namespace) -> None:
    """What the brokers report of their table topics (runtime info), since they started."""
    rows: list[dict[str, Any]] = []
    for addr in await broker_addrs(admin, args.broker_addr):
        rt = await admin.broker_runtime_info(addr)
        rows += [
            {"brokerAddr": addr, **s.to_json()} for s in rt.table_topics if args.topic in (None, s.topic)
        ]
    right = ("rows tiered", "lag", "commits", "version", "failures", "lost", "cpu s")
    t = make_table(
        "broker",
        "topic",
        "rows tiered",
        "lag",
        "commits",
        "version",
        "failures",
        "lost",
        "cpu s",
        "last commit",
        "last error",
        right=right,
    )
    for r in rows:
        t.add_row(
            r["brokerAddr"],
            r["topic"],
            str(r["rowsTiered"]),
            str(r["lag"]),
            str(r["commits"]),
            "-" if r["version"] is None else str(r["version"]),
            str(r["failures"]),
            str(r["rowsLost"]),
            f"{r['tierCpuSeconds'] + r['maintainCpuSeconds']:.1f}",
            local_time(r["lastCommitTimestamp"] or 0),
            r["lastError"] or "",
        )
    args.out.result(rows, t, f"{len(rows)} table topic(s), as the brokers report them")
