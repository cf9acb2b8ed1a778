"""Delivery lateness of a burst of delayed messages (issue target: p99 ≤ 100 ms).

N messages with delay level 1 (2 s here) are put into a store as fast as possible, so they fall
due in one burst; the broker's ScheduleMessageService delivers them. Lateness of a message =
store time of its delivered copy - (store time of the delayed original + the level's delay).
A baseline in the same run: the time to put the same N messages without a delay.

    .venv/bin/python benches/delay_bench.py [--messages 100000] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from benchlib import write_results

from ferromq.broker.schedule import ScheduleMessageService
from ferromq.store import MessageStore

DELAY_MS = 2000


def pct(values: list[int], p: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def run(n: int, work: Path) -> dict[str, object]:
    store = MessageStore(
        work / "store",
        mapped_file_size_commitlog=256 << 20,
        message_delay_level="2s 5s",
        max_hash_slot_num=1_000_000,
        max_index_num=4_000_000,
    )
    try:
        body = b"x" * 100
        started = time.perf_counter()
        for i in range(n):
            store.put("Plain", i % 8, body, properties=f"TAGS\x01T\x02KEYS\x01k{i}")
        baseline = time.perf_counter() - started

        woke = 0

        def delivered(topic: str, queue_id: int, next_offset: int, tags_code: int | None) -> None:
            nonlocal woke
            woke += 1

        service = ScheduleMessageService(store, "2s 5s", work / "delayOffset.json", 10.0, delivered)
        await service.start()
        started = time.perf_counter()
        for i in range(n):
            store.put("Real", i % 8, body, properties=f"DELAY\x011\x02TAGS\x01T\x02KEYS\x01d{i}")
        put_seconds = time.perf_counter() - started
        deadline = time.monotonic() + 60 + n / 10_000
        while time.monotonic() < deadline:
            if sum(store.max_offset("Real", q) for q in range(8)) >= n:
                break
            await asyncio.sleep(0.01)
        await service.stop()
        originals = {m.properties["KEYS"]: m.store_timestamp for m in _all(store, "SCHEDULE_TOPIC_XXXX", [0])}
        late = [
            m.store_timestamp - (originals[m.properties["KEYS"]] + DELAY_MS)
            for m in _all(store, "Real", range(8))
        ]
        early = sum(1 for x in late if x < 0)
        return {
            "messages": n,
            "delivered": len(late),
            "early": early,
            "lateness_ms_p50": pct(late, 50),
            "lateness_ms_p99": pct(late, 99),
            "lateness_ms_max": max(late),
            "put_delayed_msgs_per_s": n / put_seconds,
            "baseline_put_msgs_per_s": n / baseline,
            "pull_wakeups": woke,
        }
    finally:
        store.close()


def _all(store: MessageStore, topic: str, queues: object) -> list:  # type: ignore[type-arg]
    out = []
    for q in queues:  # type: ignore[attr-defined]
        offset, hi = 0, store.max_offset(topic, q)
        while offset < hi:
            got = store.get_messages(topic, q, offset, 1000)
            out += got
            offset += len(got) or 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default="bench-results/delay_bench.json")
    args = ap.parse_args()
    if args.quick:
        args.messages = 5000
    with tempfile.TemporaryDirectory(prefix="ferromq-delay-") as tmp:
        r = asyncio.run(run(args.messages, Path(tmp)))
    print(f"delayed delivery of a burst of {r['messages']} messages (level 1 = {DELAY_MS} ms)")
    head = f"{'delivered':>10}{'early':>7}{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}"
    print(head + f"{'put delayed/s':>15}{'put plain/s':>13}")
    print(
        f"{r['delivered']:>10}{r['early']:>7}{r['lateness_ms_p50']:>8}{r['lateness_ms_p99']:>8}"
        f"{r['lateness_ms_max']:>8}{r['put_delayed_msgs_per_s']:>15.0f}{r['baseline_put_msgs_per_s']:>13.0f}"
    )
    write_results(args.json, {"params": vars(args), "result": r})


if __name__ == "__main__":
    main()
