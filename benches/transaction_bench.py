"""Transaction throughput: half message + local transaction + commit, through the Python
TransactionProducer and a broker in this process; plain sends of the same messages in the same
run are the baseline. Also checks that every committed message became visible.

    .venv/bin/python benches/transaction_bench.py [--transactions 5000] [--concurrency 64] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib import write_results

from ferromq.broker import Broker, load_broker_config
from ferromq.client import LocalTransactionState, Message, Producer, ReceivedMessage, TransactionProducer
from ferromq.namesrv import NameServer


class Commit:
    async def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE

    async def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE


async def timed(n: int, concurrency: int, one: Any) -> float:
    sem = asyncio.Semaphore(concurrency)

    async def run(i: int) -> None:
        async with sem:
            await one(i)

    started = time.perf_counter()
    await asyncio.gather(*(run(i) for i in range(n)))
    return time.perf_counter() - started


async def bench(n: int, concurrency: int, work: Path) -> dict[str, Any]:
    ns = NameServer("127.0.0.1", 0)
    await ns.start()
    cfg = load_broker_config(
        None,
        broker_name="bench",
        listen_port=0,
        store_path_root_dir=str(work / "store"),
        namesrv_addr=f"127.0.0.1:{ns.port}",
        mapped_file_size_commitlog=256 << 20,
        max_hash_slot_num=1_000_000,
        max_index_num=4_000_000,
    )
    broker = Broker(cfg, "127.0.0.1")
    await broker.start()
    namesrv = f"127.0.0.1:{ns.port}"
    body = b"x" * 1024
    try:
        async with Producer("bench-plain", namesrv) as plain:
            await plain.send(Message("Plain", body))
            plain_s = await timed(n, concurrency, lambda i: plain.send(Message("Plain", body)))
        async with TransactionProducer("bench-tx", namesrv, Commit()) as tx:
            await tx.send_message_in_transaction(Message("Tx", body))
            tx_s = await timed(n, concurrency, lambda i: tx.send_message_in_transaction(Message("Tx", body)))
        deadline = time.monotonic() + 30
        visible = 0
        while time.monotonic() < deadline:
            visible = sum(broker.store.max_offset("Tx", q) for q in range(4))
            if visible >= n + 1:
                break
            await asyncio.sleep(0.05)
    finally:
        await broker.stop()
        await ns.stop()
    return {
        "transactions": n,
        "concurrency": concurrency,
        "tx_per_s": n / tx_s,
        "plain_sends_per_s": n / plain_s,
        "ratio_tx_to_plain": plain_s / tx_s,
        "committed_visible": visible - 1,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--transactions", type=int, default=5000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default="bench-results/transaction_bench.json")
    args = ap.parse_args()
    if args.quick:
        args.transactions = 500
    with tempfile.TemporaryDirectory(prefix="ferromq-tx-") as tmp:
        r = asyncio.run(bench(args.transactions, args.concurrency, Path(tmp)))
    print(f"transactions (half + local commit + END_TRANSACTION), 1 KiB, {r['concurrency']} in flight")
    print(f"{'transactions':>13}{'tx/s':>10}{'plain sends/s':>15}{'tx/plain':>10}{'visible':>9}")
    print(
        f"{r['transactions']:>13}{r['tx_per_s']:>10.0f}{r['plain_sends_per_s']:>15.0f}"
        f"{r['ratio_tx_to_plain']:>10.2f}{r['committed_visible']:>9}"
    )
    write_results(args.json, {"params": vars(args), "result": r})


if __name__ == "__main__":
    main()
