"""End-to-end produce/consume through the official RocketMQ C++ client (PyPI rocketmq 0.4.4)
against `ferromq serve`, for ASYNC_FLUSH and SYNC_FLUSH.

Per flush mode: P producer threads send N messages of SIZE bytes with send_sync (latency of each
send: p50/p99/p99.9, messages/s), then a push consumer receives them all (messages/s). The client
runs in child processes so the broker process is measured alone. Prints a table, writes JSON.

    .venv/bin/python benches/e2e_bench.py [--messages 50000] [--size 1024] [--producers 8] [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import free_port, serving, write_results

HERE = Path(__file__).resolve().parent

CLIENT = HERE / "e2e_client.py"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000


def run_mode(flush: str, args: argparse.Namespace, work: Path) -> dict[str, object]:
    ns_port, broker_port = free_port(), free_port()
    conf = work / f"broker-{flush}.conf"
    conf.write_text(f"brokerName=bench\nflushDiskType={flush}\nstorePathRootDir={work / flush}\n")
    with serving(conf, work / f"broker-{flush}.log", broker_port, ns_port):
        namesrv = f"127.0.0.1:{ns_port}"
        topic = f"Bench{flush.split('_')[0].title()}"

        def client(mode: str, n: int) -> dict[str, object]:
            out = subprocess.run(
                [
                    sys.executable,
                    str(CLIENT),
                    mode,
                    namesrv,
                    topic,
                    str(n),
                    str(args.size),
                    str(args.producers),
                ],
                capture_output=True,
                text=True,
                timeout=600,
            )
            for ln in out.stdout.splitlines():
                if ln.startswith("RESULT "):
                    return json.loads(ln[7:])
            raise SystemExit(f"{mode} failed: {out.stdout[-2000:]}{out.stderr[-2000:]}")

        n = args.messages // args.producers * args.producers
        produced = client("produce", n)
        lat = produced["latencies"]
        assert isinstance(lat, list)
        sent = len(lat)
        consumed = client("consume", sent + 1)  # + the warm-up message
        return {
            "flush": flush,
            "messages": sent,
            "send_errors": produced["errors"],
            "produce_msgs_per_s": sent / float(produced["elapsed"]),  # type: ignore[arg-type]
            "send_p50_ms": pct(lat, 50),
            "send_p99_ms": pct(lat, 99),
            "send_p999_ms": pct(lat, 99.9),
            "send_mean_ms": statistics.fmean(lat) * 1000,
            "consumed": consumed["received"],
            "consume_msgs_per_s": float(consumed["received"]) / max(float(consumed["elapsed"]), 1e-9),  # type: ignore[arg-type]
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--producers", type=int, default=8)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default="bench-results/e2e_bench.json")
    args = ap.parse_args()
    if args.quick:
        args.messages = 2000
    results = []
    with tempfile.TemporaryDirectory(prefix="ferromq-e2e-") as tmp:
        for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
            results.append(run_mode(flush, args, Path(tmp)))
    head = (
        f"{'flush':<12}{'msgs':>8}{'errors':>8}{'produce/s':>12}{'p50 ms':>9}{'p99 ms':>9}{'p99.9 ms':>10}"
        f"{'consume/s':>12}"
    )
    print(f"end-to-end through the C++ client, {args.size} B bodies, {args.producers} producer threads")
    print(head)
    for r in results:
        print(
            f"{r['flush']:<12}{r['messages']:>8}{r['send_errors']:>8}{r['produce_msgs_per_s']:>12.0f}"
            f"{r['send_p50_ms']:>9.2f}"
            f"{r['send_p99_ms']:>9.2f}{r['send_p999_ms']:>10.2f}{r['consume_msgs_per_s']:>12.0f}"
        )
    write_results(args.json, {"params": vars(args), "results": results})


if __name__ == "__main__":
    main()
