"""The strings and messages of RocketMQ 5.x's POP consumption, as its broker and clients write them.

* Retry topics of popping groups (`KeyBuilder`): v1 `%RETRY%<group>_<topic>`, v2 `%RETRY%<group>+<topic>`;
  a "mark" names a message's kind of topic in receipts (0 normal, 1 v1 retry, 2 v2 retry).
* The receipt of a popped message (`POP_CK`, `ExtraInfoUtil`): eight fields separated by spaces.
* The reply's `startOffsetInfo` / `msgOffsetInfo` (per queue, `;`-separated) the client builds the
  receipts from.
* Checkpoint (`ck`) and ack (`ack`, `bAck`) messages of the revive topic
  `rmq_sys_REVIVE_LOG_<cluster>`: fastjson bodies (short names, keys in alphabetical order) and
  their UNIQ_KEYs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any

import orjson

from ferromq.protocol.constants import RETRY_PREFIX

REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
# The revive queue id of an orderly pop (no checkpoint is written).
ORDER_REVIVE_QUEUE = 999
CK_TAG, ACK_TAG, BATCH_ACK_TAG = "ck", "ack", "bAck"
PROPERTY_POP_CK = "POP_CK"
PROPERTY_FIRST_POP_TIME = "1ST_POP_TIME"
# A checkpoint is due one second before its messages become visible again, so the acks (due at
# that time) come after it in the revive queue (PopAckConstants.ackTimeInterval).
ACK_TIME_INTERVAL_MS = 1000

MARK_NORMAL, MARK_RETRY_V1, MARK_RETRY_V2 = "0", "1", "2"
JAVA_LONG_MIN, JAVA_LONG_MAX = -(2**63), 2**63 - 1


_DIGITS = re.compile(r"[+-]?[0-9]+")


def _java_long(text: str) -> int:
    """A number as Rust's `str::parse::<i64>` reads it (no spaces, `_` or non-ASCII digits, which
    `int` takes); ValueError otherwise (its range is checked by the caller)."""
    if not _DIGITS.fullmatch(text):
        raise ValueError(text)
    return int(text)


def saturating(ms: int) -> int:
    """A time sum kept within a Java long, as the Rust rules keep theirs (`saturating_add`): a
    receipt or a checkpoint holds whatever times a client sent."""
    return max(JAVA_LONG_MIN, min(JAVA_LONG_MAX, ms))


def revive_topic(cluster: str) -> str:
    return REVIVE_TOPIC_PREFIX + cluster


def retry_topic(topic: str, group: str, v2: bool = False) -> str:
    """The retry topic of `group` popping `topic` (KeyBuilder.buildPopRetryTopic)."""
    return f"{RETRY_PREFIX}{group}+{topic}" if v2 else f"{RETRY_PREFIX}{group}_{topic}"


def retry_mark(topic: str) -> str:
    if not topic.startswith(RETRY_PREFIX):
        return MARK_NORMAL
    return MARK_RETRY_V2 if "+" in topic else MARK_RETRY_V1


def real_topic(topic: str, group: str, mark: str) -> str:
    """The topic a receipt's message lies in: the retry topic for marks 1 and 2."""
    if mark == MARK_RETRY_V1:
        return retry_topic(topic, group)
    if mark == MARK_RETRY_V2:
        return retry_topic(topic, group, v2=True)
    return topic


def normal_topic(topic: str, group: str) -> str:
    """The topic a pop retry topic is for (the topic itself otherwise)."""
    for prefix in (f"{RETRY_PREFIX}{group}_", f"{RETRY_PREFIX}{group}+"):
        if topic.startswith(prefix):
            return topic[len(prefix) :]
    return topic


@dataclass(frozen=True)
class ExtraInfo:
    """A popped message's receipt (`POP_CK` / the ack's `extraInfo`)."""

    ck_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    mark: str
    broker_name: str
    queue_id: int
    offset: int

    def __str__(self) -> str:
        # Its fields in their order, as the Rust rules write a receipt (`ExtraInfo`'s Display in
        # crates/broker/src/popper.rs; tests/unit/test_pop_formats.py feeds both the same).
        return " ".join(str(getattr(self, f.name)) for f in fields(self))

    @classmethod
    def parse(cls, text: str) -> ExtraInfo:
        """ValueError when it is not a receipt."""
        f = text.split(" ")
        try:
            if len(f) < 7:
                raise ValueError
            numbers = [_java_long(f[i]) for i in (0, 1, 2, 3, 6)]
            offset = _java_long(f[7]) if len(f) > 7 else numbers[0]
            if not all(JAVA_LONG_MIN <= n <= JAVA_LONG_MAX for n in (*numbers, offset)):
                raise ValueError
            ck_offset, pop_time, invisible_time, revive_qid, queue_id = numbers
            return cls(ck_offset, pop_time, invisible_time, revive_qid, f[4], f[5], queue_id, offset)
        except ValueError:
            raise ValueError(
                f"extraInfo {text[:200]!r} is not a receipt (8 fields separated by spaces)"
            ) from None

    @property
    def orderly(self) -> bool:
        return self.revive_qid == ORDER_REVIVE_QUEUE

    def expired(self, now_ms: int) -> bool:
        """Whether its message is visible again (ReceiptHandle.isExpired): the 5.x proxy refuses to
        ack it or change its invisible time then."""
        return saturating(self.pop_time + self.invisible_time) <= now_ms

    def changed(self, pop_time: int, invisible_time: int, revive_qid: int) -> ExtraInfo:
        """The receipt after a change of invisible time answered (popTime, invisibleTime,
        reviveQid): the change's checkpoint holds the message alone (an orderly pop's keeps its
        first)."""
        ck_offset = self.ck_offset if self.orderly else self.offset
        return ExtraInfo(
            ck_offset,
            pop_time,
            invisible_time,
            revive_qid,
            self.mark,
            self.broker_name,
            self.queue_id,
            self.offset,
        )


def offset_info(entries: list[tuple[str, int, str]]) -> str:
    """`startOffsetInfo` / `msgOffsetInfo`: `<mark> <queueId> <value>` joined by `;`."""
    return ";".join(f"{mark} {qid} {value}" for mark, qid, value in entries)


def merge_key(
    topic: str, group: str, queue_id: int, start_offset: int, pop_time: int, broker_name: str
) -> str:
    """What joins an ack to its checkpoint in the revive service (plain concatenation, as Java's)."""
    return f"{topic}{group}{queue_id}{start_offset}{pop_time}{broker_name}"


def uniq_key(
    topic: str, queue_id: int, offset: int, group: str, pop_time: int, broker_name: str, tag: str
) -> str:
    """The UNIQ_KEY of a checkpoint (its start offset, tag `ck`) or an ack (the acked offset)."""
    return f"{topic}@{queue_id}@{offset}@{group}@{pop_time}@{broker_name}@{tag}"


def _json(data: dict[str, Any]) -> bytes:
    # fastjson writes fields in alphabetical order.
    return orjson.dumps(data, option=orjson.OPT_SORT_KEYS)


@dataclass
class CheckPoint:
    """`PopCheckPoint`: what one pop took from one queue, and which of it was acked since."""

    start_offset: int
    pop_time: int
    invisible_time: int
    queue_id: int
    topic: str
    group: str
    broker_name: str
    offset_diffs: list[int]
    bitmap: int = 0
    revive_offset: int = 0
    re_put_times: int = 0
    due_time: int = JAVA_LONG_MAX
    """When the revive service may decide it: its revive time, or earlier when the timer
    delivered it earlier than that time says (set as it is read from the revive queue)."""

    @property
    def num(self) -> int:
        return len(self.offset_diffs)

    @property
    def revive_time(self) -> int:
        return saturating(self.pop_time + self.invisible_time)

    def offsets(self) -> list[int]:
        return [self.start_offset + d for d in self.offset_diffs]

    def index_of(self, offset: int) -> int:
        """The entry of a queue offset, -1 when the checkpoint does not hold it."""
        try:
            return self.offset_diffs.index(offset - self.start_offset)
        except ValueError:
            return -1

    def acked(self, index: int) -> bool:
        return bool(self.bitmap >> index & 1)

    def merge_key(self) -> str:
        return merge_key(
            self.topic, self.group, self.queue_id, self.start_offset, self.pop_time, self.broker_name
        )

    def uniq_key(self) -> str:
        return uniq_key(
            self.topic, self.queue_id, self.start_offset, self.group, self.pop_time, self.broker_name, CK_TAG
        )

    def to_json(self) -> bytes:
        data: dict[str, Any] = {
            "bm": self.bitmap,
            "bn": self.broker_name,
            "c": self.group,
            "d": self.offset_diffs,
            "it": self.invisible_time,
            "n": self.num,
            "pt": self.pop_time,
            "q": self.queue_id,
            "reviveTime": self.revive_time,
            "ro": self.revive_offset,
            "so": self.start_offset,
            "t": self.topic,
        }
        if self.re_put_times:
            data["rp"] = str(self.re_put_times)
        return _json(data)

    @classmethod
    def from_json(cls, body: bytes) -> CheckPoint:
        d = orjson.loads(body)
        so = int(d.get("so", d.get("startOffset", 0)))
        diffs = d.get("d", d.get("queueOffsetDiff"))
        n = int(d.get("n", d.get("num", 0)))
        return cls(
            start_offset=so,
            pop_time=int(d.get("pt", d.get("popTime", 0))),
            invisible_time=int(d.get("it", d.get("invisibleTime", 0))),
            queue_id=int(d.get("q", d.get("queueId", 0))),
            topic=str(d.get("t", d.get("topic", ""))),
            group=str(d.get("c", d.get("cid", ""))),
            broker_name=str(d.get("bn", d.get("brokerName", "")) or ""),
            # Old checkpoints without diffs hold n consecutive offsets.
            offset_diffs=[int(x) for x in diffs] if diffs else list(range(n)),
            bitmap=int(d.get("bm", d.get("bitMap", 0))),
            revive_offset=int(d.get("ro", d.get("reviveOffset", 0))),
            re_put_times=int(d.get("rp", d.get("rePutTimes", 0)) or 0),
        )


@dataclass(frozen=True)
class AckMsg:
    """`AckMsg` (tag `ack`) or, with `offsets`, `BatchAckMsg` (tag `bAck`)."""

    start_offset: int
    pop_time: int
    queue_id: int
    topic: str
    group: str
    broker_name: str
    ack_offset: int = -1
    offsets: list[int] = field(default_factory=list)

    def merge_key(self) -> str:
        return merge_key(
            self.topic, self.group, self.queue_id, self.start_offset, self.pop_time, self.broker_name
        )

    def uniq_key(self) -> str:
        return uniq_key(
            self.topic, self.queue_id, self.ack_offset, self.group, self.pop_time, self.broker_name, ACK_TAG
        )

    def acked_offsets(self) -> list[int]:
        return self.offsets if self.offsets else [self.ack_offset]

    def to_json(self) -> bytes:
        data: dict[str, Any] = {
            "ao": self.ack_offset,
            "bn": self.broker_name,
            "c": self.group,
            "pt": self.pop_time,
            "q": self.queue_id,
            "so": self.start_offset,
            "t": self.topic,
        }
        if self.offsets:
            data["aol"] = self.offsets
        return _json(data)

    @classmethod
    def from_json(cls, body: bytes) -> AckMsg:
        d = orjson.loads(body)
        return cls(
            start_offset=int(d.get("so", d.get("startOffset", 0))),
            pop_time=int(d.get("pt", d.get("popTime", 0))),
            queue_id=int(d.get("q", d.get("queueId", 0))),
            topic=str(d.get("t", d.get("topic", ""))),
            group=str(d.get("c", d.get("consumerGroup", ""))),
            broker_name=str(d.get("bn", d.get("brokerName", "")) or ""),
            ack_offset=int(d.get("ao", d.get("ackOffset", -1))),
            offsets=[int(x) for x in d.get("aol", d.get("ackOffsetList")) or []],
        )
