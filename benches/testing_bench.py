"""Start-to-ready time and memory of a broker for tests: `ferromq.testing.Broker()` against Apache
RocketMQ 4.9.7 (name server + broker JVMs, started by `tools/apache_rocketmq.py` as the interop tests
do), both on free 127.0.0.1 ports with a fresh temporary store.

ferromq: each round is a fresh Python process that imports `ferromq.testing` (timed apart), starts a
Broker (timed: from the call until the broker is registered with its name server and answers), and
reports its RSS then and its RSS before starting. Java: each round starts the name server and the
broker JVMs and times until the broker is registered; RSS is the two JVMs' sum. Goal of the issue:
ready in <= 0.5 s and <= 100 MB RSS.

    .venv/bin/python benches/testing_bench.py [--rounds 5] [--java-rounds 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import write_results

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from apache_rocketmq import have_java, start_rocketmq

ROUND = """
import json, time
t0 = time.perf_counter()
from ferromq.testing import Broker
imported = time.perf_counter() - t0

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024

before = rss()
t1 = time.perf_counter()
with Broker() as broker:
    ready = time.perf_counter() - t1
    after = rss()
print(json.dumps({"import_s": imported, "ready_s": ready, "rss_before": before, "rss_ready": after}))
"""


def rss_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def ferromq_round() -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", ROUND], capture_output=True, text=True, check=True, timeout=120
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def java_round() -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="ferromq-testing-bench-") as tmp:
        t0 = time.perf_counter()
        mq = start_rocketmq(Path(tmp) / "rocketmq")
        try:
            ready = time.perf_counter() - t0
            pids = [p.pid for p in (mq.namesrv_proc, mq.broker_proc) if p is not None]
            rss = sum(rss_of(pid) for pid in pids)
        finally:
            mq.stop()
    return {"ready_s": ready, "rss_ready": rss}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--java-rounds", type=int, default=3)
    ap.add_argument("--json", default="bench-results/testing_bench.json")
    args = ap.parse_args()

    ferro = [ferromq_round() for _ in range(args.rounds)]
    java = [java_round() for _ in range(args.java_rounds)] if have_java() and args.java_rounds else []

    def med(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    mib = 1024 * 1024
    print(f"\n{'broker for tests':<42} {'ready s (median)':>17} {'RSS MiB':>9} {'rounds':>7}")
    print(
        f"{'ferromq.testing.Broker() (in process)':<42} {med(ferro, 'ready_s'):>17.3f} "
        f"{med(ferro, 'rss_ready') / mib:>9.0f} {len(ferro):>7}"
    )
    print(f"{'  of which the process before start':<42} {'':>17} {med(ferro, 'rss_before') / mib:>9.0f}")
    print(f"{'  import ferromq.testing':<42} {med(ferro, 'import_s'):>17.3f}")
    ratios = {}
    if java:
        print(
            f"{'Apache RocketMQ 4.9.7 (2 JVMs)':<42} {med(java, 'ready_s'):>17.3f} "
            f"{med(java, 'rss_ready') / mib:>9.0f} {len(java):>7}"
        )
        ratios = {
            "ready_java_over_ferromq": med(java, "ready_s") / med(ferro, "ready_s"),
            "rss_java_over_ferromq": med(java, "rss_ready") / med(ferro, "rss_ready"),
        }
        print(
            f"Java / ferromq: ready {ratios['ready_java_over_ferromq']:.0f}x, "
            f"RSS {ratios['rss_java_over_ferromq']:.1f}x"
        )
    write_results(args.json, {"bench": "testing", "ferromq": ferro, "java": java, "ratios": ratios})


if __name__ == "__main__":
    main()
