"""Random faults in a controller-mode cluster across hosts, with the Jepsen-style checker's table.

The cluster is tests/cluster/harness.py's: six network namespaces on a bridge of their own (two
name servers with their ACL, three controllers taking only signed requests, one group of two
brokers in controller mode with allAckInSyncStateSet, a client host), a SYNC load of the Python
client (one message at a time, each tried up to three times), an orderly push consumer, and a
forger sending unsigned heartbeats in the first master's name to every controller all along.
Each round draws one fault (seeded), lets it last `--fault-seconds`, waits until 50 more sends
are acknowledged, and, when the fault killed a process, restarts it and waits for both brokers to
be in sync again. At the end the checker reads everything back (`ferromq.testing.checker`).

    sudo .venv/bin/python benches/partition_bench.py [--rounds 20] [--seed 1] [--fault-seconds 15]

Goal: nothing acknowledged lost (a violation of any kind fails the run), and no fault costs the
group more than 15 s without an acknowledged write. Prints tables and writes
benches/results/partition_bench.json. Needs root (network namespaces).
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE), str(ROOT / "tools")]

from benchlib import render, write_results  # noqa: E402

from ferromq.testing.hosts import Hosts, available, cuts_available  # noqa: E402
from ferromq.testing.waiting import WaitTimeout  # noqa: E402
from tests.cluster.harness import HOSTS, Cluster, Fault  # noqa: E402
from tests.cluster.java_cluster import JavaCluster  # noqa: E402

GOAL_SECONDS = 15.0


def faults(cluster: Cluster, seconds: float) -> dict[str, Callable[[], Fault]]:
    def kill_master() -> Fault:
        old = cluster.master()
        fault = cluster.kill_master()
        cluster.restart(old)
        return fault

    menu = {
        "kill -9 master": kill_master,
        "partition master": lambda: cluster.partition_master(seconds),
        "SIGSTOP master": lambda: cluster.pause_master(seconds),
        "partition slave": lambda: cluster.partition_slave(seconds),
        "disk full slave": lambda: cluster.fill_slave_disk(seconds),
        "reset slave replication": cluster.reset_slave_replication,
        "partition controller leader": lambda: cluster.partition_controller_leader(seconds),
        "kill -9 controller leader": cluster.kill_controller_leader,
    }
    if cuts_available() is None:
        menu["cut master from controllers"] = lambda: cluster.cut_master_from_controllers(seconds)
    return menu


def run(
    rounds: int, seed: int, seconds: float, java: bool = False, skip: tuple[str, ...] = ()
) -> dict[str, Any]:
    rng = random.Random(seed)
    work = tempfile.mkdtemp(prefix="partition-bench-")
    with Hosts(HOSTS, Path(work)) as hosts:
        cluster = JavaCluster(hosts) if java else Cluster(hosts)
        try:
            cluster.start()
            cluster.start_clients()
            if not java:  # Java 5.3.3's controllers take anyone's heartbeats (java_cluster.py)
                cluster.forge_heartbeats()
            menu = {k: v for k, v in faults(cluster, seconds).items() if k not in skip}
            kinds = sorted(menu)
            rows: list[dict[str, Any]] = []  # round, fault, target, no_write_s
            stopped = ""
            for n in range(rounds):
                kind = kinds[n] if n < len(kinds) else rng.choice(kinds)  # each kind at least once
                try:
                    fault = menu[kind]()
                    cluster.wait_in_sync(180)
                except WaitTimeout as e:  # the cluster did not come back: the rounds end here
                    stopped = f"round {n + 1} ({kind}): {e}"
                    print(stopped, flush=True)
                    break
                gap = cluster.gap_during(fault)
                row: dict[str, Any] = {
                    "round": n + 1,
                    "fault": kind,
                    "target": fault.target,
                    "no_write_s": round(gap, 2),
                }
                rows.append(row)
                print(f"round {n + 1:>2}: {kind:<28} {fault.target:<14} no ack for {gap:5.1f} s")
            report = cluster.verdict()
            print(f"{'Java 5.3.3' if java else 'ferromq'}: {report.summary()}", flush=True)
        except BaseException:
            for name in hosts.procs:
                print(f"--- {name} ---\n{hosts.log(name)[-3000:]}")
            print(f"the run's files are kept in {work}")
            raise
    if stopped:
        print(f"the run's files are kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    by_kind: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        by_kind[row["fault"]].append(row["no_write_s"])
    return {
        "stopped": stopped,
        "rounds": rows,
        "by_fault": {
            kind: {"rounds": len(gaps), "median_s": statistics.median(gaps), "max_s": max(gaps)}
            for kind, gaps in by_kind.items()
        },
        "checker": {
            "acknowledged": report.acknowledged,
            "given_up": report.gave_up,
            "lost": len(report.lost),
            "moved": len(report.moved),
            "duplicated": report.duplicated,
            "unexplained_duplicates": len(report.unexplained_duplicates),
            "stored_unacknowledged": report.stored_unacknowledged,
            "not_delivered": len(report.not_delivered),
            "out_of_order": len(report.out_of_order),
            "redelivered": report.redelivered,
            "longest_no_write_s": round(report.longest_gap, 2),
            "client_wait_p99_s": round(report.stall_p99, 3),
            "client_wait_max_s": round(report.stall_max, 2),
            "violations": report.violations,
        },
    }


def save(args: argparse.Namespace, started: float, results: dict[str, Any]) -> None:
    doc = {
        "bench": "partition_bench",
        "args": vars(args),
        "goal_no_write_s": GOAL_SECONDS,
        "seconds": round(time.time() - started),
        **results,
    }
    write_results(args.out, doc)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fault-seconds", type=float, default=15.0)
    parser.add_argument("--java", action="store_true", help="also Apache RocketMQ 5.3.3, same rounds")
    parser.add_argument(
        "--skip-java",
        action="append",
        default=[],
        metavar="FAULT",
        help="a fault the Java rounds leave out (Java 5.3.3's slave never recovers from a full disk)",
    )
    parser.add_argument("--only-java", action="store_true", help="no ferromq rounds")
    parser.add_argument("--out", default=str(HERE / "results" / "partition_bench.json"))
    args = parser.parse_args()
    if (why := available()) is not None:
        raise SystemExit(f"partition_bench needs network namespaces: {why}")
    started = time.time()
    results: dict[str, Any] = {}
    if not args.only_java:
        results["ferromq"] = run(args.rounds, args.seed, args.fault_seconds)
        save(args, started, results)  # kept if the Java run fails
    if args.java or args.only_java:
        skip = tuple(args.skip_java)
        results["java"] = run(args.rounds, args.seed, args.fault_seconds, java=True, skip=skip)
    names = list(results)
    kinds = sorted({kind for r in results.values() for kind in r["by_fault"]})
    head = [
        "fault",
        "rounds",
        *(f"{n} no-write median / max s" for n in names),
        f"ferromq <= {GOAL_SECONDS:.0f} s",
    ]
    table = []
    for kind in kinds:
        cells = []
        for n in names:
            v = results[n]["by_fault"].get(kind)
            cells.append(f"{v['median_s']:.1f} / {v['max_s']:.1f}" if v else "-")
        ours = results.get("ferromq", {}).get("by_fault", {}).get(kind)
        met = "yes" if ours and ours["max_s"] <= GOAL_SECONDS else "NO"
        rounds = max(results[n]["by_fault"].get(kind, {}).get("rounds", 0) for n in names)
        table.append([kind, str(rounds), *cells, met])
    print()
    print(render(head, table))
    print()
    checks = list(results[names[0]]["checker"])
    print(render(["checker", *names], [[c, *(str(results[n]["checker"][c]) for n in names)] for c in checks]))
    save(args, started, results)
    broken = {n: r["checker"]["violations"] for n, r in results.items() if r["checker"]["violations"]}
    if broken:
        raise SystemExit(f"violations: {broken}")


if __name__ == "__main__":
    main()
