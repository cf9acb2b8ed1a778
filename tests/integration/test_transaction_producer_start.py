"""A transaction producer that has not sent anything yet (one restarted after a crash, say) is known to the
brokers, so their transaction checks reach it: it learns them from TBW102's route at start and heartbeats
them, as the Java producer does."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ferromq.client import LocalTransactionState, Message, ReceivedMessage, TransactionProducer
from ferromq.testing.waiting import until

from .brokerkit import running


class Listener:
    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE


def test_started_transaction_producer_is_known_to_the_broker(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (ns, broker):
            async with TransactionProducer("TxStartPG", f"127.0.0.1:{ns.port}", Listener()):
                await until(
                    lambda: broker.clients.producer_channel("TxStartPG") is not None,
                    "the broker to know the producer",
                    timeout=5,
                )

    asyncio.run(asyncio.wait_for(main(), 60))
