"""`ferromq admin` on clusters and brokers: cluster, broker-status, broker-config,
update-broker-config, and the retention commands (delete-expired-commitlog, clean-expired-cq)."""

from __future__ import annotations

import argparse
from typing import Any

from ferromq.admin.output import UsageError, make_table
from ferromq.admin.targets import broker_addrs
from ferromq.client import Admin
from ferromq.errors import FerroMQError


async def show_cluster(admin: Admin, args: argparse.Namespace) -> None:
    info = await admin.cluster_info()
    rows: list[dict[str, Any]] = []
    for cluster, names in sorted(info.clusters.items()):
        for name in sorted(names):
            for broker_id, addr in sorted(info.brokers[name].addrs.items()):
                try:
                    rt = await admin.broker_runtime_info(addr)
                except (FerroMQError, OSError) as e:
                    rows.append(
                        {
                            "cluster": cluster,
                            "brokerName": name,
                            "brokerId": broker_id,
                            "addr": addr,
                            "error": str(e),
                        }
                    )
                    continue
                rows.append(
                    {
                        "cluster": cluster,
                        "brokerName": name,
                        "brokerId": broker_id,
                        "addr": addr,
                        "version": rt.version,
                        "putTps": rt.put_tps,
                        "getTps": rt.get_tps,
                        "putToday": rt.put_today,
                        "getToday": rt.get_today,
                        "commitLogDiskRatio": rt.commitlog_disk_ratio,
                    }
                )
    t = make_table(
        "cluster",
        "broker",
        "id",
        "address",
        "version",
        "in TPS",
        "out TPS",
        "put today",
        "get today",
        "disk",
        right=("id", "in TPS", "out TPS", "put today", "get today", "disk"),
    )
    for r in rows:
        if "error" in r:
            t.add_row(
                r["cluster"],
                r["brokerName"],
                str(r["brokerId"]),
                r["addr"],
                f"[red]{r['error']}[/red]",
                "",
                "",
                "",
                "",
                "",
            )
        else:
            t.add_row(
                r["cluster"],
                r["brokerName"],
                str(r["brokerId"]),
                r["addr"],
                r["version"],
                f"{r['putTps']:.2f}",
                f"{r['getTps']:.2f}",
                str(r["putToday"]),
                str(r["getToday"]),
                f"{r['commitLogDiskRatio']:.0%}",
            )
    args.out.result(rows, t)


async def broker_status(admin: Admin, args: argparse.Namespace) -> None:
    out = {}
    tables = []
    for addr in await broker_addrs(admin, args.broker_addr):
        rt = await admin.broker_runtime_info(addr)
        out[addr] = rt.table
        t = make_table("key", "value", title=f"broker {addr}")
        for k, v in sorted(rt.table.items()):
            t.add_row(k, v)
        tables.append(t)
    args.out.result(out, *tables)


async def broker_config(admin: Admin, args: argparse.Namespace) -> None:
    out = {}
    tables = []
    for addr in await broker_addrs(admin, args.broker_addr):
        cfg = await admin.broker_config(addr)
        out[addr] = cfg
        t = make_table("key", "value", title=f"broker {addr}")
        for k, v in sorted(cfg.items()):
            t.add_row(k, v)
        tables.append(t)
    args.out.result(out, *tables)


def _key_values(pairs: list[str]) -> dict[str, str]:
    out = {}
    for p in pairs:
        key, sep, value = p.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"expected KEY=VALUE, got {p!r}")
        out[key.strip()] = value.strip()
    return out


async def update_broker_config(admin: Admin, args: argparse.Namespace) -> None:
    props = _key_values(args.pairs)
    addrs = await admin.update_broker_config(props, broker_addr=args.broker_addr, cluster=args.cluster)
    args.out.result(
        {"updated": addrs, "config": props},
        f"updated {', '.join(f'{k}={v}' for k, v in props.items())} on {', '.join(addrs)}",
    )


async def delete_expired_commitlog(admin: Admin, args: argparse.Namespace) -> None:
    addrs = await admin.delete_expired_commitlog(broker_addr=args.broker_addr, cluster=args.cluster)
    args.out.result(
        {"told": addrs},
        f"expired CommitLog files will be deleted by the next retention rounds of {', '.join(addrs)}",
    )


async def clean_expired_cq(admin: Admin, args: argparse.Namespace) -> None:
    addrs = await admin.clean_expired_consume_queue(broker_addr=args.broker_addr, cluster=args.cluster)
    args.out.result({"told": addrs}, f"consume queues with nothing left dropped on {', '.join(addrs)}")
