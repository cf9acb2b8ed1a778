"""POP consumption as RocketMQ 5.x's broker serves it (PopMessageProcessor, AckMessageProcessor,
ChangeInvisibleTimeProcessor, PopReviveService).

A pop takes messages from a group's queues (and its pop retry topic), moves the group's offset
past them at once, and writes a checkpoint (`ck`) into the revive topic as a timer message due
when the messages become visible again. An ack writes an `ack` message due at the same time.
Those rules are Rust's (`ferromq_broker::popper`, here `rules`), which the data planes run
too; this module adds what only Python serves: orderly pops' order information, SQL92 filters,
peeks, notifications, batch acks and the revive service. The revive service reads each revive
queue: a checkpoint whose time has passed, and whose acks the
timer has delivered by then, puts every message not acked back into the group's pop retry topic
(`%RETRY%<group>_<topic>`) with its reconsume count raised, however often it came back: as in
Java's broker, a message is dead when its consumer says so (a 4.x/5.x remoting client sends it
back past retryMaxTimes, the gRPC front forwards it past the retry policy's attempts). So the
broker keeps no state of its own: everything is in messages and offsets, and survives restarts
and kill -9 (at least once).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from ferromq import _store
from ferromq.broker.clients import Subscription, parse_subscription
from ferromq.broker.pop.formats import (
    ACK_TAG,
    ACK_TIME_INTERVAL_MS,
    BATCH_ACK_TAG,
    CK_TAG,
    ORDER_REVIVE_QUEUE,
    PROPERTY_FIRST_POP_TIME,
    REVIVE_GROUP,
    AckMsg,
    CheckPoint,
    ExtraInfo,
    normal_topic,
    real_topic,
    retry_topic,
    revive_topic,
    saturating,
)
from ferromq.broker.pop.order import ConsumerOrderInfoManager
from ferromq.broker.state import BrokerState
from ferromq.broker.subscriptions import PRIORITY_FACTOR
from ferromq.broker.topics import PRIORITY_MESSAGE_TYPE
from ferromq.errors import BrokerError, FerroMQError, StoreError
from ferromq.message import StoredMessage, decode_messages, encode_properties
from ferromq.protocol.codes import ResponseCode
from ferromq.protocol.constants import PROPERTY_TIMER_DELIVER_MS, RETRY_PREFIX

if TYPE_CHECKING:
    from ferromq.broker.long_polling import PullRequestHoldService
    from ferromq.tiered.service import TieredService

logger = logging.getLogger(__name__)


class PopContext(BrokerState, Protocol):
    """What POP's service uses of the broker."""

    @property
    def hold(self) -> PullRequestHoldService: ...
    @property
    def tiered(self) -> TieredService | None: ...
    def message_arrived(self, topic: str, queue_id: int, next_offset: int, tags_code: int | None) -> None: ...


MAX_POP_NUMS = 32
# The bits a batch ack's bitSet may name (Java reads up to Integer.MAX_VALUE).
MAX_BATCH_ACK_BITS = 2**31 - 1
REVIVE_INTERVAL_SECONDS = 1.0
# Messages one revive round reads from a revive queue (the rest wait for the next round).
REVIVE_READ_MAX = 2048
# A checkpoint is revived once the timer has delivered this far past its time: its acks (due at
# that time) are in the revive queue by then.
REVIVE_MARGIN_MS = 2000
# A message that could not be put back is checkpointed again alone, due this much later each time
# (PopReviveService's ckRewriteIntervalsInSeconds), the last interval for ever after: it never
# blocks the checkpoints behind it, and is never dropped.
RE_PUT_INTERVALS_S = (10, 20, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
# Java's PutMessageStatus names, for the revive metric's put_status.
_PUT_STATUS = {
    ResponseCode.MESSAGE_ILLEGAL: "MESSAGE_ILLEGAL",
    ResponseCode.SERVICE_NOT_AVAILABLE: "SERVICE_NOT_AVAILABLE",
    ResponseCode.FLUSH_DISK_TIMEOUT: "FLUSH_DISK_TIMEOUT",
}


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

    popped: _store.Popped
    order_counts: list[str] | None = None
    """orderCountInfo entries of an orderly pop."""

    @property
    def found(self) -> bool:
        return self.popped.count > 0

    @property
    def body(self) -> bytes:
        return self.popped.body

    def header(self) -> dict[str, str]:
        p = self.popped
        return {
            "popTime": str(p.pop_time),
            "invisibleTime": str(p.invisible_time),
            "reviveQid": str(p.revive_qid),
            "restNum": str(p.rest),
            "startOffsetInfo": p.start_offset_info,
            "msgOffsetInfo": p.msg_offset_info,
            **({"orderCountInfo": ";".join(self.order_counts)} if self.order_counts is not None else {}),
        }


class PopService:
    def __init__(self, broker: PopContext, orders: ConsumerOrderInfoManager) -> None:
        self._broker = broker
        self.orders = orders
        self._rules: tuple[tuple[Any, ...], _store.Popper] | None = None
        self._polling: dict[tuple[str, str, int], int] = {}
        self._task: asyncio.Task[None] | None = None
        self.revived = 0
        """Messages put back into retry topics (or dead letter queues) since start."""
        self.revive_puts: Counter[tuple[str, str, str]] = Counter()
        """(group, topic, put status) -> messages the revive service tried to put back since
        start (rocketmq_pop_revive_retry_messages_total)."""

    @property
    def revive_topic(self) -> str:
        return revive_topic(self._broker.config.broker_cluster_name)

    @property
    def revive_queues(self) -> int:
        return max(1, self._broker.config.revive_queue_num)

    @property
    def rules(self) -> _store.Popper:
        """The pop rules (`ferromq_broker::popper`) for the broker's settings now, shared with
        the data planes; made anew when a setting changes."""
        b = self._broker
        cfg = b.config
        settings = (cfg.broker_name, cfg.broker_cluster_name, self.revive_queues, cfg.enable_retry_topic_v2)
        key = (b.store.raw, b.offsets.shared, settings, cfg.broker_addr, b.tiered)
        if self._rules is None or self._rules[0] != key:
            rules = _store.Popper(
                b.store.raw,
                b.offsets.shared,
                broker_name=cfg.broker_name,
                cluster=cfg.broker_cluster_name,
                revive_queues=self.revive_queues,
                retry_v2=cfg.enable_retry_topic_v2,
                broker_addr=cfg.broker_addr,
            )
            rules.set_cold_reader(b.tiered)  # pops read below the local min from the bucket
            self._rules = (key, rules)
        return self._rules[1]

    def _read_queues(self, topic: str) -> int | None:
        tc = self._broker.topics.get(topic)
        return tc.read_queue_nums if tc is not None else None

    def _priority_factor(self, topic: str, group: str) -> int | None:
        """The group's `priority.factor` when `topic` is a PRIORITY topic (RocketMQ 5.4), else None."""
        tc = self._broker.topics.get(topic)
        if tc is None or tc.message_type != PRIORITY_MESSAGE_TYPE:
            return None
        g = self._broker.groups.groups.get(group)
        return g.priority_factor if g is not None else PRIORITY_FACTOR.default

    def _stored(self, stored: Iterable[tuple[str, int, int, int]]) -> None:
        """Checkpoints and acks the rules stored: the timer enqueues them."""
        for topic, queue_id, next_offset, tags_code in stored:
            self._broker.message_arrived(topic, queue_id, next_offset, tags_code)

    def _ensure_revive_topic(self) -> None:
        """A system topic of reviveQueueNum queues, made by the first pop or ack (Java makes it at
        start; a broker nobody pops from lists the topics a 4.x broker does)."""
        self._broker.topics.create_system_topic(self.revive_topic, self.revive_queues)

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._revive_loop(), name="pop-revive")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    # -- pop -------------------------------------------------------------------------------------

    def _queues(self, req: PopRequest) -> list[int]:
        """The request's queue, or every read queue of its topic (none once the topic is gone)."""
        if req.queue_id >= 0:
            return [req.queue_id]
        return list(range(self._read_queues(req.topic) or 0))

    def _check_master(self) -> None:
        """Pops and acks write checkpoints, acks and offsets: never into a slave's replica."""
        if self._broker.config.is_slave:
            raise BrokerError(
                "pops and acks are served by the master; this broker is a slave",
                ResponseCode.SERVICE_NOT_AVAILABLE,
            )

    def try_pop(self, req: PopRequest) -> PopResult:
        """One pass over the request's queues, by the rules; an orderly pop skips the queues whose
        last pop is neither acked nor visible again, and records what it took."""
        self._check_master()
        self._ensure_revive_topic()
        blocked = []
        if req.order:
            blocked = [
                q
                for q in self._queues(req)
                if self.orders.blocked(req.attempt_id, req.topic, req.group, q, req.invisible_time)
            ]
        codes = req.subscription.codes
        popped = self.rules.pop(
            req.group,
            req.topic,
            req.queue_id,
            req.max_msgs,
            req.invisible_time,
            req.init_mode,
            None if codes is None else list(codes),
            self._read_queues,
            order=req.order,
            blocked=blocked,
            keep=req.sql,
            priority_factor=self._priority_factor(req.topic, req.group),
        )
        self._stored(popped.stored)
        if not req.order:
            return PopResult(popped)
        counts: list[str] = []
        for topic, queue_id, _start, queue_offsets in popped.takes:
            counts += self.orders.update(
                req.attempt_id, topic, req.group, queue_id, popped.pop_time, req.invisible_time, queue_offsets
            )
        return PopResult(popped, counts)

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
        """PEEK_MESSAGE: what a pop would return, with nothing moved or checkpointed; one reply
        carries at most what one pull may (maxTransfer*OnMessageInMemory), whatever it asks."""
        cfg = self._broker.config
        max_msgs = min(max_msgs, cfg.max_transfer_count_on_message_in_memory)
        max_bytes = cfg.max_transfer_bytes_on_message_in_memory
        req = PopRequest(group, topic, queue_id, max_msgs, 0, 0, 0, 1, pop_subscription(topic, None, None))
        records: list[bytes] = []
        size = rest = 0
        for t, q, offset in self.positions(req, commit=False):
            if len(records) < max_msgs and size < max_bytes:
                got = self._broker.store.pull(t, q, offset, max_msgs - len(records))
                read = split_records(got.body)
                taken = 0
                for record in read:
                    if records and size + len(record) > max_bytes:
                        break
                    records.append(record)
                    size += len(record)
                    taken += 1
                # Nothing is filtered here: the records taken are the queue's next ones.
                offset = got.next_begin_offset if taken == len(read) else offset + taken
            rest += max(0, self._broker.store.max_offset(t, q) - offset)
        return records, rest

    def _backlog(self, group: str, topic: str, queue_id: int) -> int:
        store = self._broker.store
        committed = self._broker.offsets.query(group, topic, queue_id)
        return max(0, store.max_offset(topic, queue_id) - max(committed, store.min_offset(topic, queue_id)))

    def _start_offset(self, req: PopRequest, topic: str, queue_id: int, commit: bool = True) -> int:
        """The group's committed offset, else (its first pop) the init offset."""
        return self.rules.start_offset(req.group, topic, queue_id, req.init_mode, commit)

    # -- ack and change of invisible time ----------------------------------------------------------

    def ack(self, group: str, topic: str, queue_id: int, offset: int, receipt: ExtraInfo) -> None:
        """ACK_MESSAGE: an `ack` message, due when the checkpoint is (an orderly pop's: the
        group's offset moves on)."""
        self._check_master()
        if receipt.orderly:
            self.rules.check_offset(self._read_queues, group, topic, queue_id, offset, True)
            self._ack_orderly(group, topic, queue_id, offset, receipt)
        else:
            self._ensure_revive_topic()
            self._stored(self.rules.ack(self._read_queues, group, topic, queue_id, offset, str(receipt)))

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
        """BATCH_ACK_MESSAGE: a `bAck` message per checkpoint the body names (an orderly pop's
        acks: each offset acked in order)."""
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
            revive_qid = int(a.get("rq", a.get("reviveQueueId", 0)))
            low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
            if low < 0 or high < 0:
                continue
            # Only the bits of offsets the queue has are read (Java skips the others too).
            acked = [
                so + i for i in bitset_indexes(str(a.get("b", a.get("bitSet", ""))), low - so, high - so)
            ]
            if not acked:
                continue
            if revive_qid == ORDER_REVIVE_QUEUE:
                receipt = ExtraInfo(so, pop_time, invisible, revive_qid, mark, "", queue_id, so)
                for offset in acked:
                    self._ack_orderly(group, topic, queue_id, offset, receipt)
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
            self._ensure_revive_topic()
            stored = self.rules.put_revive(
                revive_qid, BATCH_ACK_TAG, msg.to_json(), msg.uniq_key(), saturating(pop_time + invisible)
            )
            self._stored([stored])

    def change_invisible(
        self, group: str, topic: str, queue_id: int, offset: int, receipt: ExtraInfo, invisible_time: int
    ) -> tuple[int, int, int]:
        """CHANGE_MESSAGE_INVISIBLETIME: a checkpoint of this message alone, due after the new
        invisible time, then an ack of the old one (an orderly pop's: its order information).
        Returns (popTime, invisibleTime, reviveQid)."""
        self._check_master()
        _store.Popper.check_invisible_time(invisible_time)
        if not receipt.orderly:
            self._ensure_revive_topic()
            changed, stored = self.rules.change_invisible(
                self._read_queues, group, topic, queue_id, offset, str(receipt), invisible_time
            )
            self._stored(stored)
            return changed
        self.rules.check_offset(self._read_queues, group, topic, queue_id, offset, False)
        now = int(time.time() * 1000)
        if offset < self._broker.offsets.query(group, topic, queue_id):
            return 0, 0, 0  # acked before: nothing to change
        self.orders.change_invisible(topic, group, queue_id, offset, receipt.pop_time, now + invisible_time)
        self._broker.hold.wake(topic, queue_id)
        return receipt.pop_time, now + invisible_time - receipt.pop_time, ORDER_REVIVE_QUEUE

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
        checkpoints due by now hold and no ack took. Returns how many messages it put back.

        The revive queue is a ledger: the round moves its offset past every checkpoint it
        decided, and a message that could not be put back is written into the ledger again as a
        checkpoint of its own, due later (`_re_put`); so one bad checkpoint neither stops the
        others nor has them revived twice. Only a store that takes nothing (the re-put refused
        too) stops the round, before that checkpoint, for the next round to read again."""
        broker = self._broker
        store, offsets, topic = broker.store, broker.offsets, self.revive_topic
        # What the timer has delivered up to: every ack due before it is in the queue now.
        # (Read before the queue, so the acks read are all the ones due before it.)
        now = int(time.time() * 1000)
        timer_read, _, _ = store.timer_progress()
        bound = min(timer_read, now) if timer_read > 0 else now
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
                self._take_revive_message(m, checkpoints)
            seen += len(batch)
            next_offset = batch[-1].queue_offset + 1
        if seen >= REVIVE_READ_MAX:
            # Acks further in the queue were not read: only checkpoints due before the last
            # message read may be decided.
            last = store.get_messages(topic, queue_id, last_read, 1)
            if last:
                bound = min(bound, _deliver_ms(last[0]))
        put_back = 0
        commit_to = last_read
        for ck in sorted(checkpoints.values(), key=lambda c: c.revive_offset):
            if ck.due_time + REVIVE_MARGIN_MS > bound:
                commit_to = ck.revive_offset - 1
                break
            revived, failed = self._revive(ck)
            put_back += revived
            if failed and not self._re_put(ck, failed, queue_id, now):
                commit_to = ck.revive_offset - 1
                break
        if commit_to > committed:
            offsets.commit(REVIVE_GROUP, topic, queue_id, commit_to)
        self.revived += put_back
        return put_back

    def _take_revive_message(self, m: StoredMessage, cks: dict[str, CheckPoint]) -> None:
        try:
            if m.tags == CK_TAG:
                ck = CheckPoint.from_json(m.body)
                ck.revive_offset = m.queue_offset
                # The timer delivered it one interval before its time: whatever its fields say,
                # it waits no longer than that for its acks.
                ck.due_time = min(ck.revive_time, saturating(_deliver_ms(m) + ACK_TIME_INTERVAL_MS))
                cks.setdefault(ck.merge_key(), ck)
            elif m.tags in (ACK_TAG, BATCH_ACK_TAG):
                ack = AckMsg.from_json(m.body)
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
                "revive queue message at %d is not a checkpoint or ack (%s); skipped", m.queue_offset, e
            )

    def _revive(self, ck: CheckPoint) -> tuple[int, list[int]]:
        """Puts back the messages of `ck` no ack took (PopReviveService.reviveRetry). Returns
        how many it put back and the offsets it could not."""
        broker = self._broker
        normal = normal_topic(ck.topic, ck.group)
        if broker.topics.get(normal) is None or broker.groups.groups.get(ck.group) is None:
            return 0, []  # topic or group deleted since: nothing to consume them
        count = 0
        failed: list[int] = []
        for index, offset in enumerate(ck.offsets()):
            if ck.acked(index):
                continue
            try:
                found = self._message_at(ck.topic, ck.queue_id, offset)
            except OSError as e:  # in a bucket that cannot be read now: checkpointed again
                logger.warning(
                    "pop revive: %s queue %d offset %d waits for the bucket: %s",
                    ck.topic,
                    ck.queue_id,
                    offset,
                    e,
                )
                failed.append(offset)
                continue
            if found is None:
                continue  # gone (retention)
            status = "PUT_OK"
            try:
                self._put_back(ck, found)
                count += 1
            except FerroMQError as e:
                status = _PUT_STATUS.get(e.code, "UNKNOWN_ERROR")
                failed.append(offset)
                logger.error(
                    "pop revive could not put back %s queue %d offset %d of group %s (%s; due later): %s",
                    ck.topic,
                    ck.queue_id,
                    offset,
                    ck.group,
                    status,
                    e,
                )
            self.revive_puts[(ck.group, ck.topic, status)] += 1
        return count, failed

    def _message_at(self, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
        """The message at a queue offset: on local disk, else in tiered storage's bucket (a pop
        may have read it there); None when neither has it. OSError: the bucket cannot be read."""
        found = self._broker.store.get_messages(topic, queue_id, offset, 1)
        if found and found[0].queue_offset == offset:
            return found[0]
        tiered = self._broker.tiered
        if tiered is None or not tiered.covers(topic, queue_id, offset):
            return None
        # The revive runs on the event loop: it never waits for the bucket (OSError: the checkpoint
        # is put again, by when the record is fetched into the read cache).
        record = tiered.record_if_cached(topic, queue_id, offset)
        messages = decode_messages(record) if record else []
        return messages[0] if messages and messages[0].queue_offset == offset else None

    def _re_put(self, ck: CheckPoint, offsets: list[int], queue_id: int, now: int) -> bool:
        """Checkpoints each of `offsets` again alone in revive queue `queue_id`, due after the
        next re-put interval (PopReviveService.rePutCK). False when the store refused it."""
        times = ck.re_put_times
        interval = RE_PUT_INTERVALS_S[min(times, len(RE_PUT_INTERVALS_S) - 1)] * 1000
        # A checkpoint already due is due again one interval from now.
        invisible = ck.invisible_time if ck.revive_time > now else now - ck.pop_time + interval
        for offset in offsets:
            again = CheckPoint(
                start_offset=offset,
                pop_time=ck.pop_time,
                invisible_time=invisible,
                queue_id=ck.queue_id,
                topic=ck.topic,
                group=ck.group,
                broker_name=ck.broker_name,
                offset_diffs=[0],
                re_put_times=times + 1,
            )
            try:
                stored = self.rules.put_revive(
                    queue_id,
                    CK_TAG,
                    again.to_json(),
                    again.uniq_key(),
                    again.revive_time - ACK_TIME_INTERVAL_MS,
                )
            except FerroMQError as e:
                logger.warning(
                    "pop revive of queue %d waits: the store refused a checkpoint: %s", queue_id, e
                )
                return False
            self._stored([stored])
        return True

    def _put_back(self, ck: CheckPoint, m: StoredMessage) -> None:
        broker = self._broker
        if ck.topic.startswith(RETRY_PREFIX):
            target = ck.topic
        else:
            target = retry_topic(ck.topic, ck.group, broker.config.enable_retry_topic_v2)
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
            reconsume_times=m.reconsume_times + 1,
            wait=False,
        )
        # Made once the store took a message for it: a name the store refuses (a group too long
        # for its retry topic) never enters the topic table. The group starts at its first message
        # unless a pop took it already (PopReviveService.initPopRetryOffset: the plane may pop as
        # soon as the topic is listed).
        if broker.topics.get(target) is None:
            broker.topics.create_system_topic(target, 1)
        if broker.offsets.query(ck.group, target, 0) < 0:
            broker.offsets.commit(ck.group, target, 0, 0)
        broker.message_arrived(r.topic, r.queue_id, r.queue_offset + 1, r.tags_code)


def _deliver_ms(m: StoredMessage) -> int:
    """When the timer was asked to deliver a message of the revive topic (0: not said)."""
    try:
        return int(m.properties.get(PROPERTY_TIMER_DELIVER_MS) or 0)
    except ValueError:
        return 0


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


def bitset_indexes(encoded: str, first: int = 0, last: int = MAX_BATCH_ACK_BITS - 1) -> list[int]:
    """The set bits from `first` to `last` of a base64 Java `BitSet.toByteArray()` (bit i in byte
    i/8, low bit first). BrokerError past MAX_POP_NUMS of them: one batch ack entry acks one
    checkpoint's messages, and a checkpoint holds at most that many."""
    if not encoded or last < first or last < 0:
        return []
    first = max(0, first)
    try:
        raw = base64.b64decode(encoded, validate=True)
    except ValueError:
        raise ValueError(f"bitSet {encoded[:40]!r} is not base64") from None
    out: list[int] = []
    for at in range(first // 8, min(len(raw), last // 8 + 1)):
        byte = raw[at]
        if not byte:
            continue
        for b in range(8):
            i = at * 8 + b
            if byte >> b & 1 and first <= i <= last:
                out.append(i)
        if len(out) > MAX_POP_NUMS:
            raise BrokerError(
                f"a batch ack entry acks at most {MAX_POP_NUMS} messages (one checkpoint's)",
                ResponseCode.INVALID_PARAMETER,
            )
    return out


def pop_subscription(topic: str, exp: str | None, exp_type: str | None) -> Subscription:
    return parse_subscription(topic, exp or "*", exp_type or "TAG", 0)
