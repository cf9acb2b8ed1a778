"""Transactional sends (RocketMQ's TransactionMQProducer).

    class Orders:
        async def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
            await db.insert_order(arg, txn_id=msg.properties["UNIQ_KEY"])
            return LocalTransactionState.COMMIT_MESSAGE

        async def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState:
            found = await db.order_by_txn(msg.msg_id)
            return LocalTransactionState.COMMIT_MESSAGE if found else LocalTransactionState.UNKNOW

    async with TransactionProducer("PG", "127.0.0.1:9876", Orders()) as producer:
        result = await producer.send_message_in_transaction(Message("Orders", b"..."), order)

`send_message_in_transaction` sends a half message (invisible to consumers), runs the local
transaction only if the broker stored it, and tells the broker the outcome with a one-way
END_TRANSACTION: COMMIT makes the message visible, ROLLBACK drops it. UNKNOW (also what an
exception or None means) leaves it pending: the broker later asks with CHECK_TRANSACTION_STATE,
which calls `check_local_transaction` on a bounded pool of workers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from ferromq.client.message import Message, ReceivedMessage, SendResult, SendStatus
from ferromq.client.producer import Producer
from ferromq.errors import BrokerError, FerroMQError
from ferromq.message import decode_messages
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import AUTO_CREATE_TOPIC_KEY, PROPERTY_UNIQ_KEY, TRANSACTION_PREPARED_TYPE
from ferromq.protocol.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader

logger = logging.getLogger(__name__)

# Checks waiting for a worker beyond this are dropped (the broker asks again); Java's
# checkRequestHolderQueue has the same size.
CHECK_QUEUE_SIZE = 2000
END_TRANSACTION_COMMIT = 8
END_TRANSACTION_ROLLBACK = 12
END_TRANSACTION_UNKNOWN = 0


class LocalTransactionState(StrEnum):
    """What a local transaction ended in (RocketMQ's names; `UNKNOWN` is an alias of `UNKNOW`)."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"
    UNKNOWN = "UNKNOW"

    def __repr__(self) -> str:  # as str(): the name, also inside a printed TransactionSendResult
        return self.name


_END_CODE = {
    LocalTransactionState.COMMIT_MESSAGE: END_TRANSACTION_COMMIT,
    LocalTransactionState.ROLLBACK_MESSAGE: END_TRANSACTION_ROLLBACK,
    LocalTransactionState.UNKNOW: END_TRANSACTION_UNKNOWN,
}

LocalStateResult = LocalTransactionState | str | None | Awaitable[LocalTransactionState | str | None]


class TransactionListener(Protocol):
    """The local side of transactions. Both methods may be plain or `async`; returning None or
    raising counts as UNKNOW.

    `execute_local_transaction(msg, arg)` runs right after the half message was stored, on the
    caller's task (a plain method runs on the event loop; keep it short or make it async).
    `msg.properties["UNIQ_KEY"]` is the transaction's message id, what checks report as `msg_id`.

    `check_local_transaction(msg)` answers the broker's question about a transaction still
    pending; plain methods run in a worker thread (`asyncio.to_thread`)."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalStateResult: ...

    def check_local_transaction(self, msg: ReceivedMessage) -> LocalStateResult: ...


@dataclass(frozen=True)
class TransactionSendResult(SendResult):
    """A send result plus what the local transaction ended in."""

    local_transaction_state: LocalTransactionState = LocalTransactionState.UNKNOW


def _state(value: object, what: str) -> LocalTransactionState:
    if value is None:
        return LocalTransactionState.UNKNOW
    if isinstance(value, str):  # members are strings too
        state = LocalTransactionState.__members__.get(value)
        if state is not None:
            return state
    logger.warning("%s returned %r, not a LocalTransactionState: taken as UNKNOW", what, value)
    return LocalTransactionState.UNKNOW


def commit_log_offset_of(offset_msg_id: str) -> int:
    """The CommitLog offset inside an offsetMsgId (its last 8 bytes, 16 hex digits)."""
    return int(offset_msg_id[-16:], 16)


class TransactionProducer(Producer):
    """A producer of transactional messages; also sends plain messages like `Producer`.

    `check_workers` bounds how many `check_local_transaction` calls run at once; other options
    are `Producer`'s."""

    def __init__(
        self,
        group: str,
        namesrv: str,
        listener: TransactionListener,
        *,
        check_workers: int = 4,
        check_queue_size: int = CHECK_QUEUE_SIZE,
        **options: Any,
    ) -> None:
        super().__init__(group, namesrv, **options)
        if check_workers < 1:
            raise ValueError("check_workers must be at least 1")
        self.listener = listener
        self.check_workers = check_workers
        self.check_queue_size = check_queue_size
        self._check_slots = asyncio.Semaphore(check_workers)
        self._checks: set[asyncio.Task[None]] = set()
        self._checking: set[str] = set()

    async def start(self) -> None:
        """Starts like `Producer`, then learns the brokers from TBW102's route and heartbeats them, as the
        Java producer does (its route refresh covers TBW102): a producer restarted after a crash gets the
        checks of its pending transactions before it sends anything."""
        await super().start()
        try:
            await self.instance.route(AUTO_CREATE_TOPIC_KEY, refresh=True)
        except (FerroMQError, OSError) as e:
            logger.warning("transaction producer %s: no route of TBW102: %s", self.group, e)

    async def stop(self) -> None:
        """Drops checks not answered yet (the broker asks again), then stops like `Producer`."""
        for task in list(self._checks):
            task.cancel()
        if self._checks:
            await asyncio.gather(*self._checks, return_exceptions=True)
        await super().stop()

    def _prepare(self, msg: Message) -> tuple[bytes, int, dict[str, str]]:
        body, sys_flag, props = super()._prepare(msg)
        if props.get("TRAN_MSG", "").lower() == "true":
            sys_flag |= TRANSACTION_PREPARED_TYPE  # as the Java client marks half messages
        return body, sys_flag, props

    # -- sending -------------------------------------------------------------------------------

    async def send_message_in_transaction(self, msg: Message, arg: Any = None) -> TransactionSendResult:
        """Sends `msg` as a half message, runs the local transaction if the broker stored it,
        and ends the transaction with its outcome. A failed send raises (no local transaction
        ran); a failure to deliver END_TRANSACTION is only logged (the broker will check)."""
        props = dict(msg.properties)
        props["TRAN_MSG"] = "true"
        props["PGROUP"] = self.group
        props.setdefault("UNIQ_KEY", self._ids.next())
        # Transactional messages cannot be delayed (the Java client drops the level too).
        half = dataclasses.replace(msg, properties=props, delay_level=0)
        result = await self.send(half)
        state = LocalTransactionState.UNKNOW
        error: BaseException | None = None
        if result.status == SendStatus.SEND_OK:
            try:
                state = _state(
                    await _maybe_await(self.listener.execute_local_transaction(half, arg)),
                    "execute_local_transaction",
                )
            except Exception as e:
                error = e
                logger.warning("local transaction of %s raised %r: state unknown", result.msg_id, e)
        else:
            state = LocalTransactionState.ROLLBACK_MESSAGE
        try:
            await self._end_transaction(result, state, error)
        except Exception as e:
            logger.warning("END_TRANSACTION of %s (%s) not sent: %s", result.msg_id, state, e)
        fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
        return TransactionSendResult(**fields, local_transaction_state=state)

    async def _end_transaction(
        self, result: SendResult, state: LocalTransactionState, error: BaseException | None
    ) -> None:
        broker = result.message_queue.broker_name
        addr = self.instance.master_addr(broker)
        if addr is None:
            await self.instance.route(result.message_queue.topic, refresh=True)
            addr = self.instance.master_addr(broker)
        if addr is None:
            raise BrokerError(f"no master address for broker {broker}", ResponseCode.SERVICE_NOT_AVAILABLE)
        ext = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=result.queue_offset,
            commit_log_offset=commit_log_offset_of(result.offset_msg_id),
            commit_or_rollback=_END_CODE[state],
            from_transaction_check=False,
            msg_id=result.msg_id,
            transaction_id=result.transaction_id or result.msg_id,
        ).to_ext()
        remark = f"executeLocalTransactionBranch exception: {error!r}" if error is not None else None
        cmd = RemotingCommand(code=RequestCode.END_TRANSACTION, ext=ext, remark=remark)
        await self.instance.invoke_oneway(addr, cmd)

    # -- checks from brokers -------------------------------------------------------------------

    async def check_transaction_state(self, broker_addr: str, cmd: RemotingCommand) -> None:
        """CHECK_TRANSACTION_STATE from a broker: queued for a worker; returns at once."""
        try:
            header = CheckTransactionStateRequestHeader.of(cmd)
            (stored,) = decode_messages(cmd.body)
        except Exception as e:
            logger.warning("transaction check from %s with an unreadable message: %s", broker_addr, e)
            return
        msg = ReceivedMessage.from_stored(stored, self._broker_name(broker_addr))
        if msg.msg_id in self._checking:
            logger.debug("transaction %s is being checked already; check dropped", msg.msg_id)
            return
        if len(self._checks) >= self.check_queue_size:
            logger.warning(
                "%d transaction checks pending; check of %s dropped", len(self._checks), msg.msg_id
            )
            return
        self._checking.add(msg.msg_id)
        task = asyncio.get_running_loop().create_task(
            self._check(broker_addr, header, msg), name=f"transaction-check-{msg.msg_id}"
        )
        self._checks.add(task)
        task.add_done_callback(self._check_done)

    def _check_done(self, task: asyncio.Task[None]) -> None:
        self._checks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("transaction check task failed", exc_info=task.exception())

    def _broker_name(self, addr: str) -> str:
        for route in self.instance.routes.values():
            for name, addrs in route.broker_addrs.items():
                if addr in addrs.values():
                    return name
        return ""

    async def _check(
        self, broker_addr: str, header: CheckTransactionStateRequestHeader, msg: ReceivedMessage
    ) -> None:
        try:
            async with self._check_slots:
                state = LocalTransactionState.UNKNOW
                error: BaseException | None = None
                try:
                    check = self.listener.check_local_transaction
                    if inspect.iscoroutinefunction(check):
                        value = await check(msg)
                    else:
                        value = await _maybe_await(await asyncio.to_thread(check, msg))
                    state = _state(value, "check_local_transaction")
                except Exception as e:
                    error = e
                    logger.warning("check of transaction %s raised %r: state unknown", msg.msg_id, e)
                ext = EndTransactionRequestHeader(
                    producer_group=self.group,
                    tran_state_table_offset=header.tran_state_table_offset,
                    commit_log_offset=header.commit_log_offset,
                    commit_or_rollback=_END_CODE[state],
                    from_transaction_check=True,
                    msg_id=msg.properties.get(PROPERTY_UNIQ_KEY) or msg.offset_msg_id,
                    transaction_id=header.transaction_id or msg.msg_id,
                ).to_ext()
                remark = f"checkLocalTransactionState Exception: {error!r}" if error is not None else None
                cmd = RemotingCommand(code=RequestCode.END_TRANSACTION, ext=ext, remark=remark)
                try:
                    await self.instance.invoke_oneway(broker_addr, cmd)
                except Exception as e:
                    logger.warning("END_TRANSACTION after the check of %s not sent: %s", msg.msg_id, e)
        finally:
            self._checking.discard(msg.msg_id)


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value
