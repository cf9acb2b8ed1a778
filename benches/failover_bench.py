"""Automatic failover: repeated kill -9 of the master of a broker group under SYNC send load.

A name server, a 3-node controller group and three ferromq brokers of one group (SYNC_MASTER,
allAckInSyncStateSet=true, controllerHeartBeatTimeoutMills=2000, brokers beating every 300 ms), each
its own process on 127.0.0.1 (tests/interop/failover_kit.py). A ferromq Python client sends SYNC, one
message after another, its routes refreshed every second (as a Java client with
pollNameServerInterval=1000). Each round: wait until all three replicas are in the SyncStateSet,
kill -9 the master, and time

  * elected: until the controllers name a new master and it took the role (its log says so);
  * first ack: until the producer's first SEND_OK stored by the new master (what a client sees);

then restart the killed broker (it cuts what it wrote alone and rejoins as a replica). At the end,
every message id is read back from the last master: lost = acknowledged ids missing there (must be
0), duplicates = ids stored more than once (client retries of sends whose answer was lost).

    .venv/bin/python benches/failover_bench.py [--kills 20] [--quick]

Prints one table and writes benches/results/failover_bench.json.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE), str(ROOT / "tools")]

from benchlib import write_results  # noqa: E402

from tests.interop.failover_kit import (  # noqa: E402
    BROKER_CONF,
    FailoverCluster,
    PythonLoad,
    start_cluster,
    stored_ids,
)
from tests.interop.replication_kit import wait_until  # noqa: E402

TOPIC = "FailoverBench"
# controllerHeartBeatTimeoutMills for the bench (the tests use more, for a loaded machine).
HEARTBEAT_TIMEOUT_MS = 2000


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def kill_round(cluster: FailoverCluster, load: PythonLoad, n: int, kills: int) -> dict[str, Any]:
    """Kills the master once all replicas are in sync; the times to a new master and to the
    first acknowledged send on it. The killed broker is started again (it rejoins as a replica)."""
    cluster.wait_in_sync(3, timeout=120)
    old = cluster.wait_master()
    old_addr = cluster.brokers[old].addr
    acked = len(load.acked)
    wait_until("sends before the kill", lambda: len(load.acked) >= acked + 50, 60)
    killed_at = time.time()
    cluster.brokers[old].kill()
    new = cluster.wait_master(not_addr=old_addr, timeout=120)
    elected = time.time() - killed_at
    new_addr = cluster.brokers[new].addr
    wait_until("a send on the new master", lambda: load.acked_since(killed_at, new_addr) > 0, 120)
    first = min(a.at for a in load.acked if a.at >= killed_at and a.store == new_addr) - killed_at
    print(f"kill {n}/{kills}: {old} -> {new}: new master after {elected:.2f} s, first ack {first:.2f} s")
    cluster.start_broker(old)
    return {"kill": n, "killed": old, "new_master": new, "elected_s": elected, "first_ack_s": first}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="smoke run: 3 kills")
    p.add_argument("--out", default=str(HERE / "results" / "failover_bench.json"))
    p.add_argument("--dir", help="scratch directory (default: a new one under /tmp)")
    args = p.parse_args()
    kills = 3 if args.quick else args.kills
    work = Path(args.dir or tempfile.mkdtemp(prefix="failover-bench-"))
    cluster = start_cluster(work, heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS)
    rounds: list[dict[str, Any]] = []
    load = PythonLoad(cluster.namesrv_addr, TOPIC, "bench").start()
    try:
        for n in range(kills):
            rounds.append(kill_round(cluster, load, n + 1, kills))
        cluster.wait_in_sync(3, timeout=120)
    finally:
        load.stop()
    try:
        stored = stored_ids(cluster.brokers[cluster.wait_master()].addr, TOPIC)
    finally:
        cluster.stop_all()
    acked_ids = {a.id for a in load.acked}
    counts = collections.Counter(stored)
    lost = sorted(acked_ids - set(counts))
    duplicates = sum(c - 1 for c in counts.values() if c > 1)
    elected_s = [r["elected_s"] for r in rounds]
    first_s = [r["first_ack_s"] for r in rounds]
    summary = {
        "kills": kills,
        "acked": len(acked_ids),
        "stored": len(stored),
        "lost": len(lost),
        "lost_ids": lost[:20],
        "duplicates": duplicates,
        "send_failures": len(load.failures),
        "not_ok": len(load.not_ok),
        "elected_p50_s": pct(elected_s, 50),
        "elected_p99_s": pct(elected_s, 99),
        "elected_max_s": max(elected_s),
        "first_ack_p50_s": pct(first_s, 50),
        "first_ack_p99_s": pct(first_s, 99),
        "first_ack_max_s": max(first_s),
        "goal_first_ack_p99_s": 5.0,
    }
    print()
    print(f"{'':18}{'p50 s':>8}{'p99 s':>8}{'max s':>8}")
    for name, values in (("elected", elected_s), ("first ack", first_s)):
        print(f"{name:18}{pct(values, 50):8.2f}{pct(values, 99):8.2f}{max(values):8.2f}")
    print(
        f"\n{kills} kills, {len(acked_ids)} sends acknowledged, {len(lost)} lost, {duplicates} duplicates, "
        f"{len(load.failures)} failed sends, {len(load.not_ok)} answered not SEND_OK"
    )
    write_results(
        args.out,
        {
            "bench": "failover",
            "params": {
                "kills": kills,
                "controller_heartbeat_timeout_ms": HEARTBEAT_TIMEOUT_MS,
                "broker_heartbeat_interval_ms": int(BROKER_CONF["brokerHeartbeatInterval"]),
                "client_route_interval_s": 1.0,
                "broker_role": BROKER_CONF["brokerRole"],
                "all_ack_in_sync_state_set": BROKER_CONF["allAckInSyncStateSet"],
            },
            "summary": summary,
            "rounds": rounds,
        },
    )
    if lost:
        raise SystemExit(f"{len(lost)} acknowledged messages lost")


if __name__ == "__main__":
    main()
