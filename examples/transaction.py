"""A transactional message: the broker keeps it invisible (a half message) until the local
transaction commits; if the producer cannot say, the broker asks it again later (check-back).

    python examples/transaction.py [--namesrv 127.0.0.1:9876]
"""

from __future__ import annotations

import argparse
import asyncio
import os

from ferromq.client import LocalTransactionState, Message, ReceivedMessage, TransactionProducer

ORDERS: dict[str, str] = {}  # stands in for a database: transaction id -> order


class OrderTransactions:
    async def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        ORDERS[msg.properties["UNIQ_KEY"]] = str(arg)  # "insert the order" in the same transaction
        return LocalTransactionState.COMMIT_MESSAGE

    async def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState:
        # The broker asks when it did not hear back: answer from the database.
        if msg.msg_id in ORDERS:
            return LocalTransactionState.COMMIT_MESSAGE
        return LocalTransactionState.ROLLBACK_MESSAGE


async def main(namesrv: str) -> None:
    async with TransactionProducer("example-tx", namesrv, OrderTransactions()) as producer:
        result = await producer.send_message_in_transaction(
            Message("Payments", b"order 42 paid"), arg="order-42"
        )
        print(f"{result.msg_id}: {result.local_transaction_state}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--namesrv", default=os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"))
    try:
        asyncio.run(main(ap.parse_args().namesrv))
    except KeyboardInterrupt:  # Ctrl-C: `async with` stopped the client on the way out
        raise SystemExit(130) from None
