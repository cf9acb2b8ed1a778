"""Transactional messages on the broker: RocketMQ 4.x's half-message design (facts sheet §12).

A transactional send is stored as a *half message* in `RMQ_SYS_TRANS_HALF_TOPIC` queue 0 (see
`processors/send.py`); consumers never see it. END_TRANSACTION resolves it: COMMIT writes the real
message and an *op message*, ROLLBACK only the op message. Op messages live in
`RMQ_SYS_TRANS_OP_HALF_TOPIC` queue 0, tag `d`, body = the resolved half message's queue offset in
decimal.

`TransactionalMessageService` does that bookkeeping and runs the check rounds. Progress is kept as
the consumer offsets of group `CID_RMQ_SYS_TRANS` on the half and op queues (consumerOffset.json),
as RocketMQ does, so a restart neither loses nor repeats checks. A round walks the half queue from
its offset: a message an op message resolved is passed; the walk stops at a message stored after
the round began or younger (by its born time) than `transaction_time_out`; one checked
`transaction_check_max` times is moved to `TRANS_CHECK_MAX_TIME_TOPIC`; any other message is
appended again to the half queue (with `TRANSACTION_CHECK_TIMES` incremented) and one live producer
of its group (PGROUP) is asked with a one-way CHECK_TRANSACTION_STATE about that copy, whose offsets
its END_TRANSACTION will name. The op offset only advances to the first op message not yet matched.

Where ferromq differs from RocketMQ (each closes a known way to lose or duplicate work):

* Every copy of a half message carries `TRAN_PREPARED_QUEUE_OFFSET` = the queue offset of the
  first one (its *origin*). A late answer to an earlier check resolves the whole transaction: the
  broker remembers resolved origins, passes their copies without asking again, and does not commit
  one transaction twice (it also looks for an earlier commit through the index, which survives a
  restart).
* Two op messages for one half offset both count as matched (RocketMQ keeps one and then never
  advances its op offset past the other); an op message with another tag or an unreadable body is
  passed.
* With no producer of the group online, the copy is made but the check count is not raised: a
  producer that is down for a while does not get its transactions discarded unasked.
* A message still within a `CHECK_IMMUNITY_TIME_IN_SECONDS` longer than `transaction_time_out` is
  moved to the end of the queue (a copy) instead of holding back everything behind it, and the
  discard test comes after the "stored in this round" test, so the answer to the last check gets
  a whole interval to arrive.
* Each round is bounded in messages examined, checks sent and time, and yields to the event loop
  as it goes, so a flood of pending transactions never becomes a check storm or a stalled broker.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import struct
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from ferromq.broker.clients import ClientConnection, ClientManager
from ferromq.broker.config import BrokerConfig
from ferromq.broker.offsets import ConsumerOffsetManager
from ferromq.broker.service import TaskService
from ferromq.broker.topics import TopicConfigManager
from ferromq.errors import BrokerError, StoreClosedError, StoreError
from ferromq.message import StoredMessage
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import (
    PROPERTY_CHECK_IMMUNITY,
    PROPERTY_CHECK_TIMES,
    PROPERTY_PREPARED_QUEUE_OFFSET,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TRANS_SYS_GROUP,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from ferromq.protocol.headers import CheckTransactionStateRequestHeader
from ferromq.store import KEEP_PROPERTIES, MessageStore, PropertyEdits, PutResult

logger = logging.getLogger(__name__)

REMOVE_TAG = "d"
HALF_QUEUE_ID = 0

# RocketMQ's remarks for END_TRANSACTION refusals (EndTransactionProcessor.checkPrepareMessage).
REMARK_NOT_FOUND = "Find prepared transaction message failed"
REMARK_GROUP = "The producer group wrong"
REMARK_QUEUE_OFFSET = "The transaction state table offset wrong"
REMARK_COMMIT_LOG_OFFSET = "The commit log offset wrong"

# Bounds of one check round (RocketMQ only limits a queue to 60 s per round).
MAX_MESSAGES_PER_ROUND = 20_000
MAX_CHECKS_PER_ROUND = 2_000
ROUND_TIME_BUDGET = 10.0
# Half and op messages read per store call; the loop yields to other tasks after each batch.
READ_BATCH = 32
# Resolved transactions remembered (by origin offset) to pass copies and refuse double commits.
RESOLVED_MEMORY = 100_000
CHECK_SEND_TIMEOUT = 3.0
# Kind of a transaction resolved by an op message the check round found (commit or rollback).
RESOLVED_BY_OP = 0

ArrivedCallback = Callable[[str, int, int, int | None], None]


def _now_ms() -> int:
    return int(time.time() * 1000)


def origin_offset(msg: StoredMessage) -> int:
    """The queue offset of the first half message of the transaction `msg` belongs to."""
    value = msg.properties.get(PROPERTY_PREPARED_QUEUE_OFFSET, "")
    return int(value) if value.lstrip("-").isdigit() else msg.queue_offset


def encode_check_body(record: bytes, topic: str, queue_id: int) -> bytes:
    """A stored record with its topic and queue replaced and TOTALSIZE recomputed: the body of
    CHECK_TRANSACTION_STATE (RocketMQ's `MessageDecoder.encode(msg, false)` of the half message
    with REAL_TOPIC/REAL_QID restored). Every other byte is the stored one."""
    (sys_flag,) = struct.unpack_from(">i", record, 36)
    born_size = 20 if sys_flag & 0x10 else 8
    store_size = 20 if sys_flag & 0x20 else 8
    body_len_at = 68 + born_size + store_size
    (body_len,) = struct.unpack_from(">i", record, body_len_at)
    topic_at = body_len_at + 4 + body_len
    old_topic_len = record[topic_at]
    rest = record[topic_at + 1 + old_topic_len :]  # properties length + properties
    new_topic = topic.encode()
    if len(new_topic) > 127:
        raise ValueError(f"topic {topic!r} is longer than 127 bytes")
    head = bytearray(record[:topic_at])
    total = len(head) + 1 + len(new_topic) + len(rest)
    struct.pack_into(">i", head, 0, total)
    struct.pack_into(">i", head, 12, queue_id)
    return bytes(head) + bytes([len(new_topic)]) + new_topic + rest


def _origin_edits(m: StoredMessage, changes: tuple[tuple[str, str, str], ...] = ()) -> PropertyEdits:
    """A re-appended half message's edits: `changes`, and its origin recorded if not yet."""
    return PropertyEdits([*changes, ("default", PROPERTY_PREPARED_QUEUE_OFFSET, str(m.queue_offset))])


class _UniqIds:
    """Client-style message ids (MessageClientIDSetter layout) for the op messages."""

    def __init__(self, ip: str) -> None:
        try:
            ip_bytes = socket.inet_aton(ip)
        except OSError:
            ip_bytes = b"\x7f\x00\x00\x01"
        self._prefix = ip_bytes + struct.pack(
            ">hi", os.getpid() & 0x7FFF, int.from_bytes(os.urandom(4), "big") >> 1
        )
        self._counter = itertools.count()

    def next(self) -> str:
        now = time.localtime()
        month_start = time.mktime((now.tm_year, now.tm_mon, 1, 0, 0, 0, 0, 0, -1))
        since = int((time.time() - month_start) * 1000) & 0x7FFFFFFF
        return (self._prefix + struct.pack(">iH", since, next(self._counter) & 0xFFFF)).hex().upper()


@dataclass
class CheckRound:
    """What one check round did."""

    half_offset: int = 0
    """The half-queue offset the round started from."""
    next_half_offset: int = 0
    op_offset: int = 0
    next_op_offset: int = 0
    examined: int = 0
    passed: int = 0
    """Half messages found resolved."""
    checked: int = 0
    """Copies made and producers asked (or no producer was online)."""
    no_producer: int = 0
    discarded: int = 0
    deferred: int = 0
    """Half messages still immune (CHECK_IMMUNITY_TIME_IN_SECONDS) moved to the end."""
    stopped_by: str = ""
    """Why the walk stopped: `end`, `young`, `new`, `budget` or `unreadable`."""


class _OpScan:
    """The op messages from the op offset on: which half offsets they resolve."""

    def __init__(self, store: MessageStore, op_offset: int, half_offset: int) -> None:
        self._store = store
        self._next = op_offset
        self._half_offset = half_offset
        self.pending: dict[int, list[int]] = {}  # half offset -> op offsets naming it
        self.done: set[int] = set()  # op offsets fully handled
        self.late: list[tuple[int, int]] = []  # (op offset, half offset) below the half offset
        self.skipped_to = op_offset  # op messages before this are gone from the store
        self.started = False

    def read_all(self) -> None:
        """Reads the op messages written since the last read."""
        self.started = True
        while True:
            batch = self._store.get_messages(TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID, self._next, READ_BATCH)
            if not batch:
                lo = self._store.min_offset(TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID)
                if self._next < lo:  # the files it was in are gone
                    self._next = self.skipped_to = lo
                    continue
                return
            for op in batch:
                self._next = op.queue_offset + 1
                half = op.body.decode("ascii", "replace").strip()
                if op.tags != REMOVE_TAG or not half.isdigit():
                    logger.warning(
                        "op message %d has tag %r and body %r; passed", op.queue_offset, op.tags, half
                    )
                    self.done.add(op.queue_offset)
                elif int(half) < self._half_offset:
                    self.done.add(op.queue_offset)
                    self.late.append((op.queue_offset, int(half)))
                else:
                    self.pending.setdefault(int(half), []).append(op.queue_offset)

    def match(self, half_offset: int) -> bool:
        """True (and its op messages done) if an op message resolved this half offset."""
        ops = self.pending.pop(half_offset, None)
        if ops is None:
            return False
        self.done.update(ops)
        return True

    def next_op_offset(self, op_offset: int) -> int:
        """The op offset can move past op messages that are done, up to the first that is not."""
        op_offset = max(op_offset, self.skipped_to)
        while op_offset in self.done:
            op_offset += 1
        return op_offset


class TransactionalMessageService(TaskService):
    """Half and op message bookkeeping for END_TRANSACTION, and the transaction check rounds."""

    service_name = "transaction-check"

    def __init__(
        self,
        store: MessageStore,
        offsets: ConsumerOffsetManager,
        topics: TopicConfigManager,
        clients: ClientManager,
        config: BrokerConfig,
        arrived: ArrivedCallback | None = None,
        *,
        max_messages_per_round: int = MAX_MESSAGES_PER_ROUND,
        max_checks_per_round: int = MAX_CHECKS_PER_ROUND,
        round_time_budget: float = ROUND_TIME_BUDGET,
    ) -> None:
        self._store = store
        self._offsets = offsets
        self._topics = topics
        self._clients = clients
        self._config = config
        self._arrived = arrived
        self.max_messages_per_round = max_messages_per_round
        self.max_checks_per_round = max_checks_per_round
        self.round_time_budget = round_time_budget
        self._ids = _UniqIds(config.broker_ip1)
        # origin offset -> COMMIT or ROLLBACK type, oldest first.
        self._resolved: OrderedDict[int, int] = OrderedDict()
        self._late_learned_to = 0
        super().__init__()
        self._round_lock = asyncio.Lock()
        self.rounds = 0

    # -- lifecycle -----------------------------------------------------------------------------

    async def _run(self) -> None:
        interval = max(self._config.transaction_check_interval, 10) / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                await self.check()
            except StoreClosedError:
                return
            except Exception:
                logger.exception("transaction check round failed")

    # -- END_TRANSACTION -----------------------------------------------------------------------

    def prepared_message(
        self, commit_log_offset: int, producer_group: str, queue_offset: int
    ) -> StoredMessage:
        """The half message END_TRANSACTION names, checked as RocketMQ checks it; a mismatch
        raises BrokerError (SYSTEM_ERROR with RocketMQ's remark)."""
        msg: StoredMessage | None
        try:
            msg = self._store.read(commit_log_offset) if commit_log_offset >= 0 else None
        except StoreClosedError:
            raise
        except StoreError:
            msg = None
        if msg is None or msg.topic != TRANS_HALF_TOPIC:
            raise BrokerError(REMARK_NOT_FOUND, ResponseCode.SYSTEM_ERROR)
        if msg.properties.get(PROPERTY_PRODUCER_GROUP) != producer_group:
            raise BrokerError(REMARK_GROUP, ResponseCode.SYSTEM_ERROR)
        if msg.queue_offset != queue_offset:
            raise BrokerError(REMARK_QUEUE_OFFSET, ResponseCode.SYSTEM_ERROR)
        if msg.physical_offset != commit_log_offset:
            raise BrokerError(REMARK_COMMIT_LOG_OFFSET, ResponseCode.SYSTEM_ERROR)
        return msg

    def commit(self, half: StoredMessage) -> PutResult | None:
        """Writes the real message, then the op message. Returns the real message's put result,
        or None when this transaction was already resolved (then only the op message is written)."""
        props = half.properties
        topic, qid = props.get(PROPERTY_REAL_TOPIC), props.get(PROPERTY_REAL_QID, "")
        if not topic or not qid.lstrip("-").isdigit():
            raise BrokerError(
                f"half message {half.msg_id} has no {PROPERTY_REAL_TOPIC}/{PROPERTY_REAL_QID}",
                ResponseCode.SYSTEM_ERROR,
            )
        origin = origin_offset(half)
        earlier = self._resolved.get(origin)
        if earlier is None and self._committed_before(half, topic, origin):
            earlier = TRANSACTION_COMMIT_TYPE
        result = None
        if earlier is None:
            # Properties as Java stores them: REAL_TOPIC, REAL_QID and TRAN_MSG stay (it builds the
            # properties string before removing them).
            sys_flag = (half.sys_flag & ~TRANSACTION_TYPE_MASK) | TRANSACTION_COMMIT_TYPE
            result = self._store.send_copy(
                half,
                topic,
                int(qid),
                KEEP_PROPERTIES,
                sys_flag=sys_flag,
                prepared_transaction_offset=half.physical_offset,
            )
            if self._arrived is not None:
                self._arrived(result.topic, result.queue_id, result.queue_offset + 1, result.tags_code)
                # A committed lite message is in its lite topic's queue now (queue 0) too.
                for lmq, next_offset in result.lmq_arrivals:
                    self._arrived(lmq, 0, next_offset, result.tags_code)
        else:
            logger.info(
                "transaction %s (half offset %d, origin %d) already %s: commit not written again",
                props.get(PROPERTY_UNIQ_KEY),
                half.queue_offset,
                origin,
                {TRANSACTION_COMMIT_TYPE: "committed", TRANSACTION_ROLLBACK_TYPE: "rolled back"}.get(
                    earlier, "resolved"
                ),
            )
        self._put_op(half.queue_offset)
        self._remember(origin, TRANSACTION_COMMIT_TYPE if earlier is None else earlier)
        return result

    def rollback(self, half: StoredMessage) -> None:
        origin = origin_offset(half)
        self._put_op(half.queue_offset)
        self._remember(origin, self._resolved.get(origin, TRANSACTION_ROLLBACK_TYPE))

    def _remember(self, origin: int, kind: int) -> None:
        self._resolved[origin] = kind
        self._resolved.move_to_end(origin)
        while len(self._resolved) > RESOLVED_MEMORY:
            self._resolved.popitem(last=False)

    def _committed_before(self, half: StoredMessage, topic: str, origin: int) -> bool:
        """Whether the real topic already holds the commit of this transaction (found through
        the index by UNIQ_KEY, identified by its origin offset)."""
        uniq = half.properties.get(PROPERTY_UNIQ_KEY)
        if not uniq:
            return False
        try:
            found = self._store.query(topic, uniq, 32)
        except StoreClosedError:
            raise
        except StoreError:
            return False
        for m in found:
            if m.uniq_key != uniq or m.sys_flag & TRANSACTION_TYPE_MASK != TRANSACTION_COMMIT_TYPE:
                continue
            their = m.properties.get(PROPERTY_PREPARED_QUEUE_OFFSET, "")
            if their.lstrip("-").isdigit():
                if int(their) == origin:
                    return True
                continue
            prepared = self._store.read(m.prepared_transaction_offset)
            if prepared is not None and origin_offset(prepared) == origin:
                return True
        return False

    def _put_op(self, half_offset: int) -> PutResult:
        self._topics.create_system_topic(TRANS_OP_HALF_TOPIC, 1)
        edits = PropertyEdits(
            [
                ("set", PROPERTY_TAGS, REMOVE_TAG),
                ("set", PROPERTY_WAIT, "false"),
                ("set", PROPERTY_UNIQ_KEY, self._ids.next()),
            ]
        )
        return self._store.send(
            TRANS_OP_HALF_TOPIC,
            HALF_QUEUE_ID,
            str(half_offset).encode(),
            "",
            edits,
            born_timestamp=_now_ms(),
            born_host=self._config.broker_addr,
        )

    # -- checks --------------------------------------------------------------------------------

    def _progress(self, topic: str) -> int:
        lo = self._store.min_offset(topic, HALF_QUEUE_ID)
        hi = self._store.max_offset(topic, HALF_QUEUE_ID)
        offset = self._offsets.query(TRANS_SYS_GROUP, topic, HALF_QUEUE_ID)
        return lo if offset < 0 else min(max(offset, lo), hi)

    async def check(self) -> CheckRound:
        """One check round over the half queue (also what the timer runs)."""
        async with self._round_lock:
            self.rounds += 1
            return await self._check()

    async def _check(self) -> CheckRound:
        store = self._store
        started_ms = _now_ms()
        deadline = time.monotonic() + self.round_time_budget
        half_offset = self._progress(TRANS_HALF_TOPIC)
        op_offset = self._progress(TRANS_OP_HALF_TOPIC)
        r = CheckRound(half_offset, half_offset, op_offset, op_offset)
        ops = _OpScan(store, op_offset, half_offset)
        no_producer: set[str] = set()
        i = half_offset
        try:
            while True:
                batch = store.get_messages(TRANS_HALF_TOPIC, HALF_QUEUE_ID, i, READ_BATCH)
                if not batch:
                    lo = store.min_offset(TRANS_HALF_TOPIC, HALF_QUEUE_ID)
                    if i < lo:  # the files it was in are gone
                        i = r.next_half_offset = lo
                        continue
                    r.stopped_by = (
                        "end" if i >= store.max_offset(TRANS_HALF_TOPIC, HALF_QUEUE_ID) else "unreadable"
                    )
                    break
                stop = False
                for m in batch:
                    if (
                        r.examined >= self.max_messages_per_round
                        or r.checked >= self.max_checks_per_round
                        or time.monotonic() > deadline
                    ):
                        r.stopped_by = "budget"
                        stop = True
                        break
                    if m.queue_offset != i:
                        logger.warning("half queue: expected offset %d, read %d", i, m.queue_offset)
                        i = m.queue_offset
                    r.examined += 1
                    if self._resolved_by(ops, m) or self._resolved_by(ops, m, reread=True):
                        r.passed += 1
                    elif await self._handle_unresolved(m, started_ms, no_producer, r) == "stop":
                        stop = True
                        break
                    i += 1
                    r.next_half_offset = i
                if stop:
                    break
                await asyncio.sleep(0)  # let END_TRANSACTION and everything else run
        finally:
            r.next_op_offset = ops.next_op_offset(op_offset)
            if r.next_half_offset != half_offset:
                self._offsets.commit(TRANS_SYS_GROUP, TRANS_HALF_TOPIC, HALF_QUEUE_ID, r.next_half_offset)
            if r.next_op_offset != op_offset:
                self._offsets.commit(TRANS_SYS_GROUP, TRANS_OP_HALF_TOPIC, HALF_QUEUE_ID, r.next_op_offset)
        if no_producer:
            logger.warning(
                "transaction check: no producer of group(s) %s online", ", ".join(sorted(no_producer))
            )
        if r.checked or r.discarded:
            logger.info(
                "transaction check: half %d->%d, op %d->%d, %d examined, %d checked, %d discarded (%s)",
                r.half_offset,
                r.next_half_offset,
                r.op_offset,
                r.next_op_offset,
                r.examined,
                r.checked,
                r.discarded,
                r.stopped_by,
            )
        return r

    def _resolved_by(self, ops: _OpScan, m: StoredMessage, *, reread: bool = False) -> bool:
        """Whether an op message resolved this half message or its transaction is known to be
        resolved. `reread` first reads the op messages written since the last read."""
        if reread or not ops.started:
            ops.read_all()
            self._learn_late(ops)
        origin = origin_offset(m)
        if ops.match(m.queue_offset):
            self._remember(origin, self._resolved.get(origin, RESOLVED_BY_OP))
            return True
        return origin in self._resolved

    def _learn_late(self, ops: _OpScan) -> None:
        """Op messages for half messages the walk already passed (answers to an earlier check
        that came after the copy was made): their transactions are resolved. Each op message is
        looked at once (rounds read again those behind an op message not matched yet)."""
        for op_offset, half_offset in ops.late:
            if op_offset < self._late_learned_to:
                continue
            self._late_learned_to = op_offset + 1
            got = self._store.get_messages(TRANS_HALF_TOPIC, HALF_QUEUE_ID, half_offset, 1)
            if got and got[0].queue_offset == half_offset:
                origin = origin_offset(got[0])
                self._remember(origin, self._resolved.get(origin, RESOLVED_BY_OP))
        ops.late.clear()

    async def _handle_unresolved(
        self, m: StoredMessage, started_ms: int, no_producer: set[str], r: CheckRound
    ) -> str:
        """Discards, checks, defers or stops at an unresolved half message: "next" or "stop"."""
        props = m.properties
        now = _now_ms()
        raw_times = props.get(PROPERTY_CHECK_TIMES, "0")
        times = int(raw_times) if raw_times.isdigit() else 0
        if m.store_timestamp >= started_ms:
            # Before the discard test (RocketMQ tests it first): the answer to the last check
            # gets a whole interval to arrive.
            r.stopped_by = "new"
            return "stop"
        # Half messages older than fileReservedTime (72 h) are dropped without a check.
        reserved_ms = self._config.file_reserved_time * 3600 * 1000
        if times >= self._config.transaction_check_max or now - m.born_timestamp > reserved_ms:
            self._discard(m)
            r.discarded += 1
            return "next"
        immunity = self._config.transaction_time_out
        raw_immunity = props.get(PROPERTY_CHECK_IMMUNITY, "")
        if raw_immunity.isdigit():
            immunity = int(raw_immunity) * 1000
        age = now - m.born_timestamp
        if 0 <= age < immunity:
            if age < self._config.transaction_time_out:
                r.stopped_by = "young"  # and so, roughly, is everything after it
                return "stop"
            # Young only by the immunity its producer asked for: moved to the end of the queue
            # rather than holding back every transaction behind it.
            self._store.send_copy(m, TRANS_HALF_TOPIC, HALF_QUEUE_ID, _origin_edits(m))
            r.deferred += 1
            return "next"
        group = props.get(PROPERTY_PRODUCER_GROUP, "")
        channel = self._clients.producer_channel(group) if group else None
        if channel is None:
            no_producer.add(group or "<none>")
            r.no_producer += 1
        else:
            times += 1
        copy = self._store.send_copy(
            m, TRANS_HALF_TOPIC, HALF_QUEUE_ID, _origin_edits(m, (("set", PROPERTY_CHECK_TIMES, str(times)),))
        )
        r.checked += 1
        if channel is not None:
            await self._send_check(channel.conn, m, copy)
        return "next"

    async def _send_check(self, conn: ClientConnection, m: StoredMessage, copy: PutResult) -> None:
        props = m.properties
        record = self._store.read_raw(copy.physical_offset)
        real_topic, real_qid = props.get(PROPERTY_REAL_TOPIC), props.get(PROPERTY_REAL_QID, "")
        if record is None or not real_topic or not real_qid.lstrip("-").isdigit():
            logger.error("half message %s cannot be checked (no record or real topic); skipped", copy.msg_id)
            return
        uniq = props.get(PROPERTY_UNIQ_KEY, "")
        ext = CheckTransactionStateRequestHeader(
            tran_state_table_offset=copy.queue_offset,
            commit_log_offset=copy.physical_offset,
            msg_id=uniq,
            transaction_id=uniq,
            offset_msg_id=copy.msg_id,
        ).to_ext()
        cmd = RemotingCommand(
            code=RequestCode.CHECK_TRANSACTION_STATE,
            ext=ext,
            body=encode_check_body(record, real_topic, int(real_qid)),
        )
        try:
            async with asyncio.timeout(CHECK_SEND_TIMEOUT):
                await conn.oneway(cmd)
        except TimeoutError:
            logger.warning("transaction check of %s to %s timed out", uniq, conn.peer)

    def _discard(self, m: StoredMessage) -> None:
        logger.warning(
            "half message %s (%s, queue offset %d) checked %s times: moved to %s",
            m.msg_id,
            m.properties.get(PROPERTY_UNIQ_KEY),
            m.queue_offset,
            m.properties.get(PROPERTY_CHECK_TIMES, "0"),
            TRANS_CHECK_MAX_TIME_TOPIC,
        )
        self._topics.create_system_topic(TRANS_CHECK_MAX_TIME_TOPIC, 1)
        r = self._store.send_copy(m, TRANS_CHECK_MAX_TIME_TOPIC, 0)
        if self._arrived is not None:
            self._arrived(r.topic, r.queue_id, r.queue_offset + 1, r.tags_code)
