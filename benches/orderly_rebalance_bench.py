"""Ordered consumption while a consumer group grows, ferromq against Apache RocketMQ 4.9.7 (issue 27,
item 8), both in the same run.

One JVM of the interop driver (`OrderlyJoin orderly-join`, tests/interop/java) creates a topic of 8
queues, starts the first member of a push consumer group with a MessageListenerOrderly (each message
takes the listener `--work` ms), sends `--n` messages to each queue with a MessageQueueSelector (queue
s gets shard s, seq 0..n-1 in order) and starts member k `--join-every` ms after member k-1, until
`--members` consume. It checks that no queue is consumed by two members at once and that no queue
skips an offset, and stops once every message was consumed. Each broker is started fresh with the
same broker.conf (tests/interop/side_by_side.py), the scenarios then run one after another:

  backlog  the producer sends as fast as its synchronous sends are answered, while members join (the
           issue's load: members' process queues hold messages when queues move, so the old owner
           unlocks 20 s later, `unlockDelay`);
  paced    one message per queue every `--send-every` ms, slower than the group consumes;
  preload  every message is stored before the first member starts.

Per run: wall time from the first member's start to the last message consumed, how long each joining
member waited for its first message on a queue (mean and max over its queues), queues stalled for
more than a second, re-deliveries, and from the Java client's log how many LOCK_BATCH_MQ answers
refused a queue (`lock Failed`) and how many unlocks the old owner delayed (`unlockDelay, begin`).

    .venv/bin/python benches/orderly_rebalance_bench.py [--quick] [--only backlog,paced]
        [--brokers ferromq,rocketmq] [--out benches/results/orderly_rebalance_bench.json]

Prints one table and writes the JSON (parameters, environment, one object per run). A full run takes
about 6 minutes (most of it the 20 s periods of the Java client); --quick about 3.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE), str(ROOT / "tools")]

from benchlib import write_results  # noqa: E402

from tests.interop.side_by_side import Endpoint, build_jar, events, run_java, running_broker  # noqa: E402

SCENARIOS: dict[str, dict[str, str]] = {
    "backlog": {"sendEvery": "0"},
    "paced": {"sendEvery": "100"},
    "preload": {"preload": "true"},
}


def client_log_counts(workdir: Path, since: float) -> dict[str, int]:
    """Lines of the Java client's log (rocketmq_client.log of the driver runs started after `since`)."""
    counts = {"lock_failed": 0, "unlock_delayed": 0, "notified": 0}
    for log in workdir.glob("java-orderly-join-*/rocketmq_client.log"):
        if log.stat().st_mtime < since:
            continue
        for line in log.read_text(errors="replace").splitlines():
            if "the message queue lock Failed" in line:
                counts["lock_failed"] += 1
            elif "unlockDelay, begin" in line:
                counts["unlock_delayed"] += 1
            elif "receive broker's notification" in line:
                counts["notified"] += 1
    return counts


def run_scenario(ep: Endpoint, name: str, args: argparse.Namespace, index: int) -> dict[str, Any]:
    started = time.time()
    results = run_java(
        ep,
        "OrderlyJoin",
        "orderly-join",
        timeout=args.timeout,
        broker=ep.broker_addr,
        topic=f"OrderlyBench{index}",
        group=f"orderly_bench_{index}",
        n=args.n,
        work=args.work,
        members=args.members,
        joinEvery=args.join_every,
        **({**SCENARIOS[name], "sendEvery": str(args.send_every)} if name == "paced" else SCENARIOS[name]),
    )
    summary = events(results, "summary")[-1]
    joins = {e["member"]: e["atMs"] for e in events(results, "join")}
    waits = [e["sinceJoinMs"] / 1000 for e in events(results, "first") if e["member"] != "m1"]
    row = {
        "broker": ep.kind,
        "scenario": name,
        "wall_s": summary["wallMs"] / 1000,
        "consumed": summary["distinct"],
        "expected": summary["expected"],
        "redeliveries": summary["redeliveries"],
        "stalls": summary["stalls"],
        "stalled_s": summary["stalledMs"] / 1000,
        "join_to_first_mean_s": statistics.fmean(waits) if waits else None,
        "join_to_first_max_s": max(waits) if waits else None,
        "queues_taken_by_joiners": len(waits),
        "joins_ms": joins,
        **client_log_counts(ep.workdir, started),
    }
    print(
        f"{ep.kind:9} {name:8} wall {row['wall_s']:6.1f} s, joiners' first message after "
        f"{row['join_to_first_mean_s'] or 0:5.1f} s (max {row['join_to_first_max_s'] or 0:5.1f}), "
        f"lock refused {row['lock_failed']}, unlock delayed {row['unlock_delayed']}",
        flush=True,
    )
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="backlog only, 100 messages per queue")
    p.add_argument("--only", help="comma-separated scenarios (backlog, paced, preload)")
    p.add_argument("--brokers", default="ferromq,rocketmq")
    p.add_argument("--n", type=int, default=200, help="messages per queue")
    p.add_argument("--work", type=int, default=50, help="ms the listener takes per message")
    p.add_argument("--members", type=int, default=3)
    p.add_argument("--join-every", type=int, default=4000, help="ms between members' starts")
    p.add_argument("--send-every", type=int, default=100, help="paced: ms between rounds of 8 sends")
    p.add_argument("--timeout", type=int, default=240, help="s per scenario run")
    p.add_argument("--rounds", type=int, default=1, help="runs of everything (the brokers take turns first)")
    p.add_argument("--out", default=str(HERE / "results" / "orderly_rebalance_bench.json"))
    p.add_argument("--dir", help="scratch directory (default: a new one under /tmp)")
    args = p.parse_args()
    if args.quick:
        args.n = 100
    names = args.only.split(",") if args.only else (["backlog"] if args.quick else list(SCENARIOS))
    build_jar()
    work = Path(args.dir or tempfile.mkdtemp(prefix="orderly-bench-"))
    rows: list[dict[str, Any]] = []
    kinds = args.brokers.split(",")
    for r in range(args.rounds):
        for kind in kinds if r % 2 == 0 else kinds[::-1]:
            with running_broker(kind, work / f"{kind}-{r}") as ep:
                for i, name in enumerate(names):
                    rows.append({"round": r, **run_scenario(ep, name, args, i)})

    def median(scenario: str, broker: str, key: str) -> float | None:
        values = [
            x[key] for x in rows if x["scenario"] == scenario and x["broker"] == broker and x[key] is not None
        ]
        return statistics.median(values) if values else None

    print(f"\nmedians of {args.rounds} round(s)")
    header = f"{'scenario':9}{'broker':10}{'wall s':>8}{'join->1st s':>12}{'max s':>7}"
    header += f"{'refused':>9}{'delayed':>9}{'stalls':>8}{'redeliv':>9}"
    print(header)
    table: dict[str, dict[str, dict[str, float | None]]] = {}
    keys = ["wall_s", "join_to_first_mean_s", "join_to_first_max_s", "lock_failed", "unlock_delayed"]
    keys += ["stalls", "redeliveries"]
    for name in names:
        for kind in kinds:
            m = {k: median(name, kind, k) for k in keys}
            table.setdefault(name, {})[kind] = m
            print(
                f"{name:9}{kind:10}{m['wall_s'] or 0:8.1f}{m['join_to_first_mean_s'] or 0:12.1f}"
                f"{m['join_to_first_max_s'] or 0:7.1f}{m['lock_failed'] or 0:9.0f}"
                f"{m['unlock_delayed'] or 0:9.0f}{m['stalls'] or 0:8.0f}{m['redeliveries'] or 0:9.0f}"
            )
    ratios = {
        n: (table[n]["ferromq"]["wall_s"] or 0) / (table[n]["rocketmq"]["wall_s"] or 1)
        for n in names
        if "ferromq" in table[n] and "rocketmq" in table[n]
    }
    for n, ratio in ratios.items():
        print(f"{n}: ferromq / RocketMQ wall time {ratio:.2f}x")
    write_results(
        args.out,
        {
            "bench": "orderly_rebalance",
            "params": {
                "queues": 8,
                "n_per_queue": args.n,
                "work_ms": args.work,
                "members": args.members,
                "join_every_ms": args.join_every,
                "send_every_ms": args.send_every,
                "scenarios": names,
                "rounds": args.rounds,
            },
            "medians": table,
            "ratios_wall_ferromq_over_rocketmq": ratios,
            "runs": rows,
        },
    )


if __name__ == "__main__":
    main()
