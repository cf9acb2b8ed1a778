"""POP consumption as RocketMQ 5.x's broker serves it (PopMessageProcessor, AckMessageProcessor,
ChangeInvisibleTimeProcessor, PopReviveService).

A pop takes messages from a group's queues (and its pop retry topic), moves the group's offset
past them at once, and writes a checkpoint (`ck`) into the revive topic as a timer message due
when the messages become visible again. An ack writes an `ack` message due at the same time. The
revive service reads each revive queue: a checkpoint whose time has passed, and whose acks the
timer has delivered by then, puts every message not acked back into the group's pop retry topic
(`%RETRY%<group>_<topic>`) with its reconsume count raised, or into `%DLQ%<group>` past the
group's retryMaxTimes. So the broker keeps no state of its own: everything is in messages and
offsets, and survives restarts and kill -9 (at least once).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from ferromq.broker.clients import Subscription, parse_subscription
from ferromq.broker.pop.formats import (
    ACK_TAG,
    ACK_TIME_INTERVAL_MS,
    BATCH_ACK_TAG,
    CK_TAG,
    MARK_NORMAL,
    ORDER_REVIVE_QUEUE,
    PROPERTY_FIRST_POP_TIME,
    PROPERTY_POP_CK,
    REVIVE_GROUP,
    AckMsg,
    CheckPoint,
    ExtraInfo,
    normal_topic,
    offset_info,
    real_topic,
    retry_mark,
    retry_topic,
    revive_topic,
)
from ferromq.broker.pop.order import ConsumerOrderInfoManager
from ferromq.errors import BrokerError, StoreError
from ferromq.message import StoredMessage, decode_messages, encode_properties, with_topic_and_properties
from ferromq.protocol.codes import ResponseCode
from ferromq.protocol.constants import (
    DLQ_PREFIX,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_KEY,
    RETRY_PREFIX,
)

if TYPE_CHECKING:
    from ferromq.broker.processors.context import PopContext
    from ferromq.store import GetResult

logger = logging.getLogger(__name__)

MAX_POP_NUMS = 32
# Share of pops that read the retry topic first (popFromRetryProbability).
POP_FROM_RETRY_PROBABILITY = 20
REVIVE_INTERVAL_SECONDS = 1.0
# Messages one revive round reads from a revive queue (the rest wait for the next round).
REVIVE_READ_MAX = 2048
# A checkpoint is revived once the timer has delivered this far past its time: its acks (due at
# that time) are in the revive queue by then.
REVIVE_MARGIN_MS = 2000
# Statuses after which a pop moves the offset to where the store says the queue goes on.
_MOVED = frozenset({"OFFSET_TOO_SMALL", "OFFSET_OVERFLOW_BADLY", "OFFSET_FOUND_NULL"})
# Statuses of a read that found nothing the filter takes, though the queue went on.
_SKIPPED = frozenset(
    {"NO_MATCHED_MESSAGE", "OFFSET_FOUND_NULL", "MESSAGE_WAS_REMOVING", "NO_MATCHED_LOGIC_QUEUE"}
)


@dataclass(frozen=True)
class PopRequest:
    group: str
    topic: str
    queue_id: int
    """-1: every queue of the topic."""
    max_msgs: int
    invisible_time: int
    poll_time: int
    born_time: int
    init_mode: int
    """0: a group's first pop starts at the queue's first message; 1 (MAX): at its last."""
    subscription: Subscription
    order: bool = False
    attempt_id: str | None = None
    sql: Callable[[dict[str, str]], bool] | None = None
    """An SQL92 subscription's filter (enablePropertyFilter)."""


@dataclass
class PopResult:
    """What a pop answers: the records (a pull body) and the reply's header fields."""

    pop_time: int
    invisible_time: int
    revive_qid: int
    records: list[bytes] = field(default_factory=list)
    rest: int = 0
    start_offsets: list[tuple[str, int, str]] = field(default_factory=list)
    msg_offsets: list[tuple[str, int, str]] = field(default_factory=list)
    order_counts: list[str] | None = None
    """orderCountInfo entries of an orderly pop."""

    @property
    def found(self) -> bool:
        return bool(self.records)

    def header(self) -> dict[str, str]:
        return {
            "popTime": str(self.pop_time),
            "invisibleTime": str(self.invisible_time),
            "reviveQid": str(self.revive_qid),
            "restNum": str(self.rest),
            "startOffsetInfo": offset_info(self.start_offsets),
            "msgOffsetInfo": offset_info(self.msg_offsets),
            **({"orderCountInfo": ";".join(self.order_counts)} if self.order_counts is not None else {}),
        }


class PopService:
    def __init__(self, broker: PopContext, orders: ConsumerOrderInfoManager) -> None:
        self._broker = broker
        self.orders = orders
        self._ck_counter = 0
        self._polling: dict[tuple[str, str, int], int] = {}
        self._task: asyncio.Task[None] | None = None
        self.revived = 0
        """Messages put back into retry topics (or dead letter queues) since start."""

    @property
    def revive_topic(self) -> str:
        return revive_topic(self._broker.config.broker_cluster_name)

    @property
    def revive_queues(self) -> int:
        return max(1, self._broker.config.revive_queue_num)

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._revive_loop(), name="pop-revive")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    # -- pop -------------------------------------------------------------------------------------

    def _queues(self, req: PopRequest, start: int = 0) -> list[int]:
        """The request's queue, or every read queue of its topic from `start` on (none once the
        topic is gone)."""
        if req.queue_id >= 0:
            return [req.queue_id]
        tc = self._broker.topics.get(req.topic)
        n = tc.read_queue_nums if tc is not None else 0
        return [(start + i) % n for i in range(n)]

    def _check_master(self) -> None:
        """Pops and acks write checkpoints, acks and offsets: never into a slave's replica."""
        if self._broker.config.is_slave:
            raise BrokerError(
                "pops and acks are served by the master; this broker is a slave",
                ResponseCode.SERVICE_NOT_AVAILABLE,
            )

    def try_pop(self, req: PopRequest) -> PopResult:
        """One pass over the request's queues (PopMessageProcessor.popMsgFromQueue for each)."""
        self._check_master()
        now = int(time.time() * 1000)
        if req.order:
            revive_qid = ORDER_REVIVE_QUEUE
        else:
            revive_qid = self._ck_counter % self.revive_queues
            self._ck_counter += 1
        result = PopResult(now, req.invisible_time, revive_qid, order_counts=[] if req.order else None)
        start = random.randrange(100)
        retry = retry_topic(req.topic, req.group, self._broker.config.enable_retry_topic_v2)
        retry_first = start < POP_FROM_RETRY_PROBABILITY
        sources = [(req.topic, q) for q in self._queues(req, start)]
        if not req.order and self._broker.topics.get(retry) is not None:
            sources = [(retry, 0), *sources] if retry_first else [*sources, (retry, 0)]
        for topic, queue_id in sources:
            left = req.max_msgs - len(result.records)
            if left <= 0:
                result.rest += self._backlog(req.group, topic, queue_id)
                continue
            self._pop_queue(req, topic, queue_id, left, result)
        return result

    def positions(
        self, req: PopRequest, commit: bool = True, skip_blocked: bool = False
    ) -> list[tuple[str, int, int]]:
        """Where a pop that found nothing waits for a message: each queue's next offset (a
        blocked queue of an orderly pop: past its end, woken by an ack)."""
        store = self._broker.store

        def position(q: int) -> int:
            if (
                skip_blocked
                and req.order
                and self.orders.blocked(req.attempt_id, req.topic, req.group, q, req.invisible_time)
            ):
                return store.max_offset(req.topic, q)
            return self._start_offset(req, req.topic, q, commit)

        out = [(req.topic, q, position(q)) for q in self._queues(req)]
        if not req.order:
            # The retry topic too, also before it exists: the first message revived into it
            # wakes the pop.
            retry = retry_topic(req.topic, req.group, self._broker.config.enable_retry_topic_v2)
            exists = self._broker.topics.get(retry) is not None
            out.append((retry, 0, self._start_offset(req, retry, 0, commit) if exists else 0))
        return out

    def unblocks_in(self, req: PopRequest) -> float | None:
        """Seconds until a queue an orderly pop skipped as blocked is free again (None: none is)."""
        if not req.order:
            return None
        now = int(time.time() * 1000)
        times = []
        for q in self._queues(req):
            info = self.orders.get(req.topic, req.group, q)
            if info is not None and info.blocks(req.attempt_id, req.invisible_time, now):
                free = info.free_at(req.invisible_time, now)
                if free is not None:
                    times.append(free)
        return (min(times) - now) / 1000.0 if times else None

    def polling(self, req: PopRequest, delta: int) -> None:
        """A pop of `req` starts (+1) or stops (-1) waiting (POLLING_INFO counts them)."""
        key = (req.topic, req.group, req.queue_id)
        n = self._polling.get(key, 0) + delta
        if n > 0:
            self._polling[key] = n
        else:
            self._polling.pop(key, None)

    def polling_count(self, topic: str, group: str, queue_id: int) -> int:
        return self._polling.get((topic, group, queue_id), 0)

    def has_message(self, req: PopRequest) -> bool:
        """NOTIFICATION: whether a pop of `req` would find a message now."""
        return any(self._backlog(req.group, t, q) > 0 for t, q, _ in self.positions(req, commit=False))

    def peek(self, group: str, topic: str, queue_id: int, max_msgs: int) -> tuple[list[bytes], int]:
        """PEEK_MESSAGE: what a pop would return, with nothing moved or checkpointed."""
        req = PopRequest(group, topic, queue_id, max_msgs, 0, 0, 0, 1, pop_subscription(topic, None, None))
        records: list[bytes] = []
        rest = 0
        for t, q, offset in self.positions(req, commit=False):
            got = self._read(req, t, q, offset, max_msgs - len(records)) if len(records) < max_msgs else None
            if got is not None:
                records.extend(split_records(got.body))
                rest += max(0, self._broker.store.max_offset(t, q) - got.next_begin_offset)
        return records, rest

    def _backlog(self, group: str, topic: str, queue_id: int) -> int:
        store = self._broker.store
        committed = self._broker.offsets.query(group, topic, queue_id)
        return max(0, store.max_offset(topic, queue_id) - max(committed, store.min_offset(topic, queue_id)))

    def _start_offset(self, req: PopRequest, topic: str, queue_id: int, commit: bool = True) -> int:
        """The group's committed offset, else (its first pop) the init offset, committed."""
        offsets, store = self._broker.offsets, self._broker.store
        offset = offsets.query(req.group, topic, queue_id)
        if offset >= 0:
            return offset
        min_offset, max_offset = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
        if req.init_mode == 0 or topic.startswith(RETRY_PREFIX) or min_offset <= 0:
            # From the first message; a new topic's (or one still whole) from its start, as
            # Java's initPopOffsetByCheckMsgInMem does while the queue's head is in memory.
            offset = min_offset
        else:
            offset = max(0, max_offset - 1)
        if commit:
            offsets.commit(req.group, topic, queue_id, offset)
        return offset

    def _read(self, req: PopRequest, topic: str, queue_id: int, offset: int, count: int) -> GetResult:
        codes = None if topic != req.topic else req.subscription.codes
        return self._broker.store.get(topic, queue_id, offset, count, 1 << 30, tag_codes=codes)

    def _pop_queue(self, req: PopRequest, topic: str, queue_id: int, count: int, out: PopResult) -> None:
        store, offsets = self._broker.store, self._broker.offsets
        if req.order and self.orders.blocked(req.attempt_id, topic, req.group, queue_id, req.invisible_time):
            return  # its last pop is neither acked nor visible again
        offset = self._start_offset(req, topic, queue_id)
        got = self._read(req, topic, queue_id, offset, count)
        if got.status in _MOVED:
            offsets.commit(req.group, topic, queue_id, got.next_begin_offset)
            offset = got.next_begin_offset
            got = self._read(req, topic, queue_id, offset, count)
        records = split_records(got.body)
        queue_offsets = list(got.queue_offsets)
        if records and req.sql is not None and topic == req.topic:
            kept = [
                (rec, qo)
                for rec, m, qo in zip(records, decode_messages(got.body), queue_offsets, strict=True)
                if req.sql(m.properties)
            ]
            records, queue_offsets = [r for r, _ in kept], [qo for _, qo in kept]
        if records:
            mark = retry_mark(topic)
            if not req.order:
                ck = CheckPoint(
                    start_offset=offset,
                    pop_time=out.pop_time,
                    invisible_time=req.invisible_time,
                    queue_id=queue_id,
                    topic=topic,
                    group=req.group,
                    broker_name=self._broker.config.broker_name,
                    offset_diffs=[o - offset for o in queue_offsets],
                )
                self._put_checkpoint(out.revive_qid, ck)
                offsets.commit(req.group, topic, queue_id, got.next_begin_offset)
            else:
                # The offset moves only with the acks.
                assert out.order_counts is not None
                out.order_counts += self.orders.update(
                    req.attempt_id,
                    topic,
                    req.group,
                    queue_id,
                    out.pop_time,
                    req.invisible_time,
                    queue_offsets,
                )
                offsets.commit(req.group, topic, queue_id, offset)
            if mark != MARK_NORMAL:
                # A retry message goes out as its topic's, with its receipt (the client cannot
                # tell the retry topic from the message).
                records = [
                    self._as_original(rec, req, topic, queue_id, offset, qo, out)
                    for rec, qo in zip(records, queue_offsets, strict=True)
                ]
            out.records.extend(records)
            out.start_offsets.append((mark, queue_id, str(offset)))
            out.msg_offsets.append((mark, queue_id, ",".join(map(str, queue_offsets))))
        elif got.next_begin_offset > offset and (got.status in _SKIPPED or got.message_count):
            # Only messages the filter does not take: the group is past them.
            offsets.commit(req.group, topic, queue_id, got.next_begin_offset)
        out.rest += max(0, store.max_offset(topic, queue_id) - got.next_begin_offset)

    def _as_original(
        self,
        record: bytes,
        req: PopRequest,
        topic: str,
        queue_id: int,
        ck_offset: int,
        offset: int,
        out: PopResult,
    ) -> bytes:
        m = decode_messages(record)[0]
        props = dict(m.properties)
        receipt = ExtraInfo(
            ck_offset,
            out.pop_time,
            out.invisible_time,
            out.revive_qid,
            retry_mark(topic),
            self._broker.config.broker_name,
            queue_id,
            offset,
        )
        props.setdefault(PROPERTY_POP_CK, str(receipt))
        return with_topic_and_properties(record, req.topic, encode_properties(props))

    # -- ack and change of invisible time ----------------------------------------------------------

    def check_offset(self, topic: str, queue_id: int, offset: int, group: str, *, past_max: bool) -> None:
        """The ack's (or change's) queue and offset must exist (Java's codes and remarks)."""
        tc = self._broker.topics.get(topic)
        if tc is None:
            raise BrokerError(f"topic[{topic}] not exist, apply first please!", ResponseCode.TOPIC_NOT_EXIST)
        if queue_id < 0 or queue_id >= tc.read_queue_nums:
            raise BrokerError(
                f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                f"[{tc.read_queue_nums}] consumer:[{group}]",
                ResponseCode.MESSAGE_ILLEGAL,
            )
        store = self._broker.store
        low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
        if offset < low or offset > high or (not past_max and offset == high):
            committed = self._broker.offsets.query(group, topic, queue_id)
            raise BrokerError(
                f"offset is illegal, key:{topic}@{queue_id}, commit:{committed}, store:{low}~{high}",
                ResponseCode.NO_MESSAGE,
            )

    def ack(self, group: str, topic: str, queue_id: int, offset: int, receipt: ExtraInfo) -> None:
        """ACK_MESSAGE: an `ack` message, due when the checkpoint is (an orderly pop's: the
        group's offset moves on)."""
        self._check_master()
        self.check_offset(topic, queue_id, offset, group, past_max=True)
        if receipt.orderly:
            self._ack_orderly(group, topic, queue_id, offset, receipt)
        else:
            self._append_ack(group, topic, queue_id, offset, receipt)

    def _append_ack(self, group: str, topic: str, queue_id: int, offset: int, receipt: ExtraInfo) -> None:
        """The `ack` message of a checked ack, due when its checkpoint is."""
        msg = AckMsg(
            start_offset=receipt.ck_offset,
            pop_time=receipt.pop_time,
            queue_id=queue_id,
            topic=topic,
            group=group,
            broker_name=receipt.broker_name,
            ack_offset=offset,
        )
        deliver = receipt.pop_time + receipt.invisible_time
        self._put_revive(receipt.revive_qid, ACK_TAG, msg.to_json(), msg.uniq_key(), deliver)

    def _ack_orderly(self, group: str, topic: str, queue_id: int, offset: int, receipt: ExtraInfo) -> None:
        offsets = self._broker.offsets
        committed = offsets.query(group, topic, queue_id)
        if offset < committed:
            return  # acked before
        following = self.orders.commit_and_next(topic, group, queue_id, offset, receipt.pop_time)
        if following == -1:
            info = self.orders.get(topic, group, queue_id)
            raise BrokerError(
                f"offset is illegal, key:{topic}@{group}@{queue_id}, old:{committed}, commit:{offset}, "
                f"next:{following}, {info}",
                ResponseCode.MESSAGE_ILLEGAL,
            )
        if following >= 0:
            offsets.commit(group, topic, queue_id, following)
            self._broker.hold.wake(topic, queue_id)  # the queue may be unblocked

    def batch_ack(self, data: dict[str, Any]) -> None:
        """BATCH_ACK_MESSAGE: a `bAck` message per checkpoint the body names."""
        self._check_master()
        acks = data.get("acks") or []
        if not acks:
            raise BrokerError("", ResponseCode.NO_MESSAGE)
        store = self._broker.store
        for a in acks:
            group, mark = str(a.get("c", a.get("consumerGroup"))), str(a.get("r", a.get("retry", "0")))
            topic = real_topic(str(a.get("t", a.get("topic"))), group, mark)
            queue_id, so = int(a.get("q", a.get("queueId"))), int(a.get("so", a.get("startOffset")))
            pop_time, invisible = int(a.get("pt", a.get("popTime"))), int(a.get("it", a.get("invisibleTime")))
            low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
            if low < 0 or high < 0:
                continue
            acked = [so + i for i in bitset_indexes(str(a.get("b", a.get("bitSet", ""))))]
            acked = [o for o in acked if low <= o <= high]
            if not acked:
                continue
            msg = AckMsg(
                start_offset=so,
                pop_time=pop_time,
                queue_id=queue_id,
                topic=topic,
                group=group,
                broker_name=str(data.get("brokerName") or self._broker.config.broker_name),
                offsets=acked,
            )
            revive_qid = int(a.get("rq", a.get("reviveQueueId", 0)))
            self._put_revive(revive_qid, BATCH_ACK_TAG, msg.to_json(), msg.uniq_key(), pop_time + invisible)

    def change_invisible(
        self, group: str, topic: str, queue_id: int, offset: int, receipt: ExtraInfo, invisible_time: int
    ) -> tuple[int, int, int]:
        """CHANGE_MESSAGE_INVISIBLETIME: a checkpoint of this message alone, due after the new
        invisible time, then an ack of the old one. Returns (popTime, invisibleTime, reviveQid)."""
        self._check_master()
        self.check_offset(topic, queue_id, offset, group, past_max=False)
        now = int(time.time() * 1000)
        if receipt.orderly:
            if offset < self._broker.offsets.query(group, topic, queue_id):
                return 0, 0, 0  # acked before: nothing to change
            self.orders.change_invisible(
                topic, group, queue_id, offset, receipt.pop_time, now + invisible_time
            )
            self._broker.hold.wake(topic, queue_id)
            return receipt.pop_time, now + invisible_time - receipt.pop_time, ORDER_REVIVE_QUEUE
        ck = CheckPoint(
            start_offset=offset,
            pop_time=now,
            invisible_time=invisible_time,
            queue_id=queue_id,
            topic=topic,
            group=group,
            broker_name=receipt.broker_name,
            offset_diffs=[0],
        )
        self._put_checkpoint(receipt.revive_qid, ck)
        self._append_ack(group, topic, queue_id, offset, receipt)
        return now, invisible_time, receipt.revive_qid

    def _put_checkpoint(self, revive_qid: int, ck: CheckPoint) -> None:
        """A `ck` message, due one interval before its messages are visible again (its acks come
        after it in the revive queue)."""
        self._put_revive(
            revive_qid, CK_TAG, ck.to_json(), ck.uniq_key(), ck.revive_time - ACK_TIME_INTERVAL_MS
        )

    def _put_revive(self, queue_id: int, tag: str, body: bytes, uniq_key: str, deliver_ms: int) -> None:
        """A message of the revive topic, due at `deliver_ms` (a timer message; at once when past)."""
        broker = self._broker
        # A system topic of reviveQueueNum queues, made by the first pop (Java makes it at start;
        # a broker nobody pops from lists the topics a 4.x broker does).
        broker.topics.create_system_topic(self.revive_topic, self.revive_queues)
        props = {"TAGS": tag, PROPERTY_UNIQ_KEY: uniq_key, PROPERTY_TIMER_DELIVER_MS: str(deliver_ms)}
        r = broker.store.put(
            self.revive_topic,
            queue_id % self.revive_queues,
            body,
            properties=props,
            born_timestamp=int(time.time() * 1000),
            born_host=broker.config.broker_addr,
            wait=False,
        )
        broker.message_arrived(r.topic, r.queue_id, r.queue_offset + 1, r.tags_code)

    # -- revive ------------------------------------------------------------------------------------

    async def _revive_loop(self) -> None:
        while True:
            await asyncio.sleep(REVIVE_INTERVAL_SECONDS)
            if self._broker.config.is_slave or self._broker.topics.get(self.revive_topic) is None:
                continue
            for queue_id in range(self.revive_queues):
                try:
                    self.revive_round(queue_id)
                except StoreError as e:
                    logger.warning("pop revive of queue %d waits: %s", queue_id, e)
                except Exception:
                    logger.exception("pop revive of queue %d failed; retrying", queue_id)
                await asyncio.sleep(0)

    def revive_round(self, queue_id: int) -> int:
        """Reads a revive queue from where the last round stopped and puts back what the
        checkpoints due by now hold and no ack took. Returns how many messages it put back."""
        broker = self._broker
        store, offsets, topic = broker.store, broker.offsets, self.revive_topic
        # What the timer has delivered up to: every ack due before it is in the queue now.
        # (Read before the queue, so the acks read are all the ones due before it.)
        timer_read, _, _ = store.timer_progress()
        bound = min(timer_read, int(time.time() * 1000)) if timer_read > 0 else int(time.time() * 1000)
        committed = offsets.query(REVIVE_GROUP, topic, queue_id)
        next_offset = max(committed + 1, store.min_offset(topic, queue_id))
        checkpoints: dict[str, CheckPoint] = {}
        last_read = next_offset - 1
        seen = 0
        while seen < REVIVE_READ_MAX:
            batch = store.get_messages(topic, queue_id, next_offset, 256)
            if not batch:
                break
            for m in batch:
                last_read = m.queue_offset
                self._take_revive_message(m.tags, m.body, m.queue_offset, checkpoints)
            seen += len(batch)
            next_offset = batch[-1].queue_offset + 1
        if seen >= REVIVE_READ_MAX:
            # Acks further in the queue were not read: only checkpoints due before the last
            # message read may be decided.
            last = store.get_messages(topic, queue_id, last_read, 1)
            if last:
                bound = min(bound, int(last[0].properties.get(PROPERTY_TIMER_DELIVER_MS, "0") or 0))
        put_back = 0
        commit_to = last_read
        for ck in sorted(checkpoints.values(), key=lambda c: c.revive_offset):
            if ck.revive_time + REVIVE_MARGIN_MS > bound:
                commit_to = ck.revive_offset - 1
                break
            put_back += self._revive(ck)
        if commit_to > committed:
            offsets.commit(REVIVE_GROUP, topic, queue_id, commit_to)
        self.revived += put_back
        return put_back

    def _take_revive_message(
        self, tag: str | None, body: bytes, queue_offset: int, cks: dict[str, CheckPoint]
    ) -> None:
        try:
            if tag == CK_TAG:
                ck = CheckPoint.from_json(body)
                ck.revive_offset = queue_offset
                cks.setdefault(ck.merge_key(), ck)
            elif tag in (ACK_TAG, BATCH_ACK_TAG):
                ack = AckMsg.from_json(body)
                if not ack.broker_name:
                    ack = AckMsg(**{**ack.__dict__, "broker_name": self._broker.config.broker_name})
                acked = cks.get(ack.merge_key())
                if acked is not None:
                    for offset in ack.acked_offsets():
                        index = acked.index_of(offset)
                        if index >= 0:
                            acked.bitmap |= 1 << index
        except (ValueError, TypeError, KeyError, orjson.JSONDecodeError) as e:
            logger.warning(
                "revive queue message at %d is not a checkpoint or ack (%s); skipped", queue_offset, e
            )

    def _revive(self, ck: CheckPoint) -> int:
        """Puts back the messages of `ck` no ack took (PopReviveService.reviveRetry)."""
        broker = self._broker
        normal = normal_topic(ck.topic, ck.group)
        if broker.topics.get(normal) is None or broker.groups.groups.get(ck.group) is None:
            return 0  # topic or group deleted since: nothing to consume them
        count = 0
        for index, offset in enumerate(ck.offsets()):
            if ck.acked(index):
                continue
            found = broker.store.get_messages(ck.topic, ck.queue_id, offset, 1)
            if not found or found[0].queue_offset != offset:
                continue  # gone (retention)
            self._put_back(ck, found[0])
            count += 1
        return count

    def _put_back(self, ck: CheckPoint, m: StoredMessage) -> None:
        broker = self._broker
        group_cfg = broker.groups.groups.get(ck.group)
        max_times = group_cfg.retry_max_times if group_cfg is not None else 16
        reconsume = m.reconsume_times + 1
        if reconsume > max_times:
            target = DLQ_PREFIX + ck.group
        elif ck.topic.startswith(RETRY_PREFIX):
            target = ck.topic
        else:
            target = retry_topic(ck.topic, ck.group, broker.config.enable_retry_topic_v2)
        if broker.topics.get(target) is None:
            broker.topics.create_system_topic(target, 1)
            broker.offsets.commit(ck.group, target, 0, 0)
        props = dict(m.properties)
        if m.reconsume_times == 0 or PROPERTY_FIRST_POP_TIME not in props:
            props[PROPERTY_FIRST_POP_TIME] = str(ck.pop_time)
        r = broker.store.put(
            target,
            0,
            m.body,
            properties=encode_properties(props),
            flag=m.flag,
            sys_flag=m.sys_flag,
            born_timestamp=m.born_timestamp,
            # PopReviveService.reviveRetry: born and store host are this broker's, not the producer's.
            born_host=broker.config.broker_addr,
            reconsume_times=reconsume,
            wait=False,
        )
        broker.message_arrived(r.topic, r.queue_id, r.queue_offset + 1, r.tags_code)


def split_records(body: bytes) -> list[bytes]:
    """The records of a read, one by one."""
    out = []
    at = 0
    while at + 4 <= len(body):
        size = int.from_bytes(body[at : at + 4], "big")
        if size <= 0:
            break
        out.append(body[at : at + size])
        at += size
    return out


def bitset_indexes(encoded: str) -> list[int]:
    """The set bits of a base64 Java `BitSet.toByteArray()` (bit i in byte i/8, low bit first)."""
    if not encoded:
        return []
    raw = base64.b64decode(encoded)
    return [i * 8 + b for i, byte in enumerate(raw) for b in range(8) if byte >> b & 1]


def pop_subscription(topic: str, exp: str | None, exp_type: str | None) -> Subscription:
    return parse_subscription(topic, exp or "*", exp_type or "TAG", 0)
