"""The send pipeline (`MessageStore.send` / `send_batch`: one Rust call that rewrites the raw
properties, appends and dispatches) against a reference encoder written here from the facts sheet
(docs/reference/rocketmq-4x-wire-and-store.md): §6.3 properties, §6.1 the stored record, §11.1 the
delay rewrite, §4.4 step 6 WAIT, §4.3 batch bodies and the joining of a batch's properties. On
thousands of generated sends (hypothesis, derandomized), every stored byte must be the reference's.
Then through a real broker: 600 seeded random sends of every kind (plain, delayed, retry topic and
DLQ redirect, batch, transaction half message, CONSUMER_SEND_MSG_BACK, END_TRANSACTION commit),
each stored record against the reference with the broker's rules from the facts sheet on top.

The pipeline's own rules, which the facts sheet leaves open (Java keeps properties in a HashMap, so
its order on disk is arbitrary), are the reference's too: a repeated name keeps its first position
and takes its last value; a name an edit adds goes last; the delay rewrite puts DELAY, REAL_TOPIC and
REAL_QID last; a put with no edits, no WAIT drop and no delay stores the string as it came; an
IPv4-mapped IPv6 born host is stored as IPv4."""

from __future__ import annotations

import asyncio
import ipaddress
import random
import re
import struct
import zlib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ferromq.errors import InvalidArgumentError, MessageIllegalError
from ferromq.message import StoredMessage
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.headers import ConsumerSendMsgBackRequestHeader, EndTransactionRequestHeader
from ferromq.store import MessageStore, PropertyEdits

from .brokerkit import Client, batch_body, running, send_ext

NV, SEP = "\x01", "\x02"  # §6.3
MAGIC = -626843481  # 0xDAA320A7, §6.1
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
LEVELS = 18  # §11.1 default messageDelayLevel
STORE = {
    "mapped_file_size_commitlog": 256 * 1024,
    "mapped_file_size_consume_queue": 20 * 1000,
    "max_hash_slot_num": 1000,
    "max_index_num": 20_000,
}

# -- the reference -------------------------------------------------------------------------------


def ref_decode(s: str) -> dict[str, str]:
    """§6.3 decoding: split on \\x02; keep a segment whose first \\x01 is neither its first nor its
    last character. A dict keeps a repeated name's first position and takes its last value."""
    out: dict[str, str] = {}
    for seg in s.split(SEP):
        i = seg.find(NV)
        if 0 < i < len(seg) - 1:
            out[seg[:i]] = seg[i + 1 :]
    return out


def ref_encode(props: dict[str, str]) -> str:
    """§6.3 encoding, Java's way: no trailing separator."""
    return SEP.join(f"{k}{NV}{v}" for k, v in props.items())


def ref_int32(value: str) -> int | None:
    text = value.strip(" \t\n\r")
    if not re.fullmatch(r"[+-]?[0-9]+", text, re.ASCII):
        return None
    n = int(text)
    return n if -(2**31) <= n < 2**31 else None


@dataclass
class Rewritten:
    properties: str
    wait: bool
    level: int | None


def ref_rewrite(
    raw: str,
    edits: list[tuple[str, str, str]],
    drop_wait: bool,
    schedule: bool,
    topic: str,
    queue_id: int,
    sys_flag: int,
) -> Rewritten:
    props = ref_decode(raw)
    for op, name, value in edits:
        if op == "set":
            props[name] = value
        elif op == "default":
            props.setdefault(name, value)
        else:
            props.pop(name, None)
    wait = props.get("WAIT", "true").encode().lower() != b"false"
    level = None
    # §11.1: only transaction types NOT (0) and COMMIT (8) are delayed; levels above the last clamp.
    if schedule and sys_flag & 0xC in (0, 0x8):
        n = ref_int32(props.get("DELAY", ""))
        if n is not None and n > 0:
            level = min(n, LEVELS)
    if not edits and not drop_wait and level is None:
        return Rewritten(raw, wait, None)
    if level is not None:
        for name in ("DELAY", "REAL_TOPIC", "REAL_QID"):
            props.pop(name, None)
        props.update(DELAY=str(level), REAL_TOPIC=topic, REAL_QID=str(queue_id))
    elif drop_wait:
        props.pop("WAIT", None)  # §4.4 step 6: 4.9.7 drops WAIT from a plain send's string
    return Rewritten(ref_encode(props), wait, level)


def ref_join(inner: str, outer: str) -> str:
    """§4.3: the batch's properties follow each message's, after a \\x02 unless that ends with one."""
    if not outer:
        return inner
    if not inner or inner.endswith(SEP):
        return inner + outer
    return inner + SEP + outer


def ref_host(addr: str) -> bytes:
    """§6.1 host: 4 (or 16) address bytes, then the port as an int."""
    host, _, port = addr.rpartition(":")
    ip = ipaddress.ip_address(host.strip("[]"))
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.packed + struct.pack(">i", int(port))


def ref_record(
    *,
    topic: str,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: str,
    store_timestamp: int,
    store_host: str,
    reconsume_times: int,
    prepared_transaction_offset: int,
    body: bytes,
    properties: str,
) -> bytes:
    born, stored = ref_host(born_host), ref_host(store_host)
    # §6.2 bits 4 and 5 say which host is IPv6.
    sys_flag = (sys_flag & ~0x30) | (0x10 if len(born) == 20 else 0) | (0x20 if len(stored) == 20 else 0)
    t, p = topic.encode(), properties.encode()
    head = struct.pack(
        ">iiiqqiq",
        zlib.crc32(body) & 0x7FFFFFFF,  # §6.6
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
    )
    rest = (
        born
        + struct.pack(">q", store_timestamp)
        + stored
        + struct.pack(">iqi", reconsume_times, prepared_transaction_offset, len(body))
        + body
        + struct.pack(">b", len(t))
        + t
        + struct.pack(">h", len(p))
        + p
    )
    total = 8 + len(head) + len(rest)
    return struct.pack(">ii", total, MAGIC) + head + rest


def ref_tags_code(properties: str) -> int:
    """§17: Java String.hashCode of TAGS over UTF-16 code units, as a signed int; 0 without tags."""
    tags = ref_decode(properties).get("TAGS")
    if not tags:
        return 0
    h = 0
    units = tags.encode("utf-16-be")
    for (unit,) in struct.iter_unpack(">H", units):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def ref_batch_body(items: list[tuple[int, bytes, str]]) -> bytes:
    """§4.3: per message TOTALSIZE, MAGIC 0, CRC 0, FLAG, body, properties."""
    out = b""
    for flag, body, props in items:
        p = props.encode()
        out += struct.pack(">iiiii", 20 + len(body) + 2 + len(p), 0, 0, flag, len(body)) + body
        out += struct.pack(">h", len(p)) + p
    return out


class QueueOffsets:
    """§6.4: a queue's offset counts dispatched messages (not prepared or rolled-back ones, whose
    stored queue offset is 0)."""

    def __init__(self) -> None:
        self.next: defaultdict[tuple[str, int], int] = defaultdict(int)

    def take(self, topic: str, queue_id: int, sys_flag: int, count: int = 1) -> int:
        if sys_flag & 0xC in (0x4, 0xC):
            return 0
        first = self.next[(topic, queue_id)]
        self.next[(topic, queue_id)] = first + count
        return first


# -- generated sends -----------------------------------------------------------------------------

NAMES = [
    "TAGS",
    "KEYS",
    "UNIQ_KEY",
    "WAIT",
    "DELAY",
    "CLUSTER",
    "REAL_TOPIC",
    "REAL_QID",
    "PGROUP",
    "TRAN_MSG",
]
name_st = st.sampled_from(NAMES) | st.text(
    st.characters(codec="utf-8", exclude_characters=NV + SEP), min_size=1, max_size=4
)
delay_st = st.sampled_from(["3", " 2 ", "0", "-1", "99", "+2", "18", "19", "2147483648", "x", "1.5"])
wait_st = st.sampled_from(["true", "false", "FALSE", "False", "no", "0"])
clean_value_st = (
    delay_st
    | wait_st
    | st.sampled_from(["TagA", "k1 k2", "ñ€😀", "DefaultCluster"])
    | st.text(st.characters(codec="utf-8", exclude_characters=NV + SEP), min_size=1, max_size=8)
)
# Raw values may be empty (dropped) or hold a \x01 (kept whole, as Java reads them).
raw_value_st = clean_value_st | st.text(st.characters(codec="utf-8", exclude_characters=SEP), max_size=6)
entry_st = st.builds(lambda n, v: f"{n}{NV}{v}", name_st | st.just(""), raw_value_st)
junk_st = st.text(st.characters(codec="utf-8", exclude_characters=SEP), max_size=4)
# The names the pipeline's rules look at, with values that exercise them.
ruled_st = st.sampled_from([("DELAY", delay_st), ("WAIT", wait_st)]).flatmap(
    lambda rule: st.tuples(st.just(rule[0]), rule[1])
)
raw_st = st.builds(
    lambda segs, trailing: SEP.join(segs) + (SEP if trailing else ""),
    st.lists(entry_st | junk_st | ruled_st.map(NV.join) | st.just(f"KEYS{NV}a{NV}b"), max_size=8),
    st.booleans(),
)
op_st = st.sampled_from(["set", "default", "remove"])
edit_st = st.tuples(op_st, name_st, clean_value_st) | st.builds(lambda op, nv: (op, *nv), op_st, ruled_st)
edits_st = st.lists(edit_st, max_size=5)
host_st = st.sampled_from(["10.1.2.3:54321", "[::1]:7", "[::ffff:192.168.0.9]:80", "127.0.0.1:0"])
topic_st = st.sampled_from(["T", "Topic_A-1", "%RETRY%g", "%DLQ%g", "RMQ_SYS_TRANS_HALF_TOPIC", "t" * 127])
sys_flag_st = st.builds(
    lambda compressed, multi, tx, hosts, codec: compressed | multi | tx | hosts | codec,
    st.sampled_from([0, 0x1]),
    st.sampled_from([0, 0x2]),
    st.sampled_from([0, 0x4, 0x8, 0xC]),
    st.sampled_from([0, 0x10, 0x20, 0x30]),
    st.sampled_from([0, 0x100, 0x200]),
)
int32_st = st.integers(-(2**31), 2**31 - 1)


@dataclass(frozen=True)
class Send:
    topic: str
    queue_id: int
    body: bytes
    properties: str
    edits: list[tuple[str, str, str]]
    drop_wait: bool
    schedule: bool
    flag: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    reconsume_times: int
    prepared_transaction_offset: int


sends = st.builds(
    Send,
    topic=topic_st,
    queue_id=st.integers(0, 7),
    body=st.binary(max_size=64),
    properties=raw_st,
    edits=edits_st,
    drop_wait=st.booleans(),
    schedule=st.booleans(),
    flag=int32_st,
    sys_flag=sys_flag_st,
    born_timestamp=st.integers(1, 2**62),
    born_host=host_st,
    reconsume_times=int32_st,
    prepared_transaction_offset=st.integers(-(2**63), 2**63 - 1),
)

GENERATED = settings(
    max_examples=2000,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("store_host", ["127.0.0.1:10911", "[::1]:10911"])
def test_single_sends_store_the_reference_bytes(tmp_path: Path, store_host: str) -> None:
    with MessageStore(tmp_path / "store", store_host=store_host, **STORE) as store:
        offsets = QueueOffsets()

        @GENERATED
        @given(sends)
        def check(s: Send) -> None:
            want = ref_rewrite(
                s.properties, s.edits, s.drop_wait, s.schedule, s.topic, s.queue_id, s.sys_flag
            )
            topic, queue_id = (
                (s.topic, s.queue_id) if want.level is None else (SCHEDULE_TOPIC, want.level - 1)
            )
            r = store.send(
                s.topic,
                s.queue_id,
                s.body,
                s.properties,
                PropertyEdits(s.edits, drop_wait=s.drop_wait, schedule=s.schedule),
                flag=s.flag,
                sys_flag=s.sys_flag,
                born_timestamp=s.born_timestamp,
                born_host=s.born_host,
                reconsume_times=s.reconsume_times,
                prepared_transaction_offset=s.prepared_transaction_offset,
            )
            expected = ref_record(
                topic=topic,
                queue_id=queue_id,
                flag=s.flag,
                queue_offset=offsets.take(topic, queue_id, s.sys_flag),
                physical_offset=r.physical_offset,
                sys_flag=s.sys_flag,
                born_timestamp=s.born_timestamp,
                born_host=s.born_host,
                store_timestamp=r.store_timestamp,
                store_host=store_host,
                reconsume_times=s.reconsume_times,
                prepared_transaction_offset=s.prepared_transaction_offset,
                body=s.body,
                properties=want.properties,
            )
            assert store.read_raw(r.physical_offset) == expected
            assert (r.topic, r.queue_id, r.wrote_bytes) == (topic, queue_id, len(expected))
            assert (r.wait, r.tags_code) == (want.wait, ref_tags_code(want.properties))

        check()


@dataclass(frozen=True)
class Batch:
    topic: str
    queue_id: int
    items: list[tuple[int, bytes, str]]
    properties: str
    edits: list[tuple[str, str, str]]
    drop_wait: bool
    sys_flag: int
    born_timestamp: int
    born_host: str


batches = st.builds(
    Batch,
    topic=topic_st,
    queue_id=st.integers(0, 7),
    items=st.lists(st.tuples(int32_st, st.binary(max_size=32), raw_st), min_size=1, max_size=5),
    properties=raw_st,
    edits=edits_st,
    drop_wait=st.booleans(),
    # A batch is never transactional (the store refuses one).
    sys_flag=sys_flag_st.map(lambda f: f & ~0xC),
    born_timestamp=st.integers(1, 2**62),
    born_host=host_st,
)


def test_batches_store_the_reference_bytes(tmp_path: Path) -> None:
    store_host = "127.0.0.1:10911"
    with MessageStore(tmp_path / "store", store_host=store_host, **STORE) as store:
        offsets = QueueOffsets()

        @settings(GENERATED, max_examples=1000)
        @given(batches)
        def check(b: Batch) -> None:
            outer = ref_rewrite(b.properties, b.edits, b.drop_wait, False, b.topic, b.queue_id, b.sys_flag)
            r = store.send_batch(
                b.topic,
                b.queue_id,
                ref_batch_body(b.items),
                b.properties,
                PropertyEdits(b.edits, drop_wait=b.drop_wait),
                sys_flag=b.sys_flag,
                born_timestamp=b.born_timestamp,
                born_host=b.born_host,
            )
            first = offsets.take(b.topic, b.queue_id, b.sys_flag, len(b.items))
            assert (r.first_queue_offset, r.wait, len(r)) == (first, outer.wait, len(b.items))
            physical = r.physical_offsets[0]
            for i, (flag, body, inner) in enumerate(b.items):
                expected = ref_record(
                    topic=b.topic,
                    queue_id=b.queue_id,
                    flag=flag,
                    queue_offset=first + i,
                    physical_offset=physical,
                    sys_flag=b.sys_flag,
                    born_timestamp=b.born_timestamp,
                    born_host=b.born_host,
                    store_timestamp=r.store_timestamp,
                    store_host=store_host,
                    reconsume_times=0,
                    prepared_transaction_offset=0,
                    body=body,
                    properties=ref_join(inner, outer.properties),
                )
                assert r.physical_offsets[i] == physical
                assert store.read_raw(physical) == expected, i
                physical += len(expected)

        check()


def test_bad_edits_and_batches_are_refused(tmp_path: Path) -> None:
    for edits in (
        [("set", "A", "")],
        [("set", "A\x01", "v")],
        [("default", "A", "x\x02y")],
        [("rename", "A", "v")],
    ):
        with pytest.raises(InvalidArgumentError):
            PropertyEdits(edits)
    with MessageStore(tmp_path / "store", **STORE) as store:
        good = ref_batch_body([(0, b"hello", "A\x01b")])
        negative = good[:-5] + struct.pack(">h", -3) + good[-3:]
        for body in (b"", good[:-1], b"\x7f" + good[1:], good + b"\x00" * 21, good + negative):
            with pytest.raises(MessageIllegalError, match="batch"):
                store.send_batch("T", 0, body, "", PropertyEdits())
        with pytest.raises(MessageIllegalError, match="at byte 30: negative properties length -3"):
            store.send_batch("T", 0, good + negative, "", PropertyEdits())
        assert store.max_offset("T", 0) == 0


# -- through a broker ----------------------------------------------------------------------------
# The broker's decisions (§4.4 steps 4-7, §11.2, §12) on top of the pipeline: seeded random sends of
# every kind over a socket, each stored record's topic, queue, sys flag and properties string
# against the reference.

CLUSTER = "DefaultCluster"
GROUP = "PipeG"
MAX_RECONSUME = 16  # §11.2: the group's retryMaxTimes


def random_properties(rng: random.Random, *, delay: bool = True) -> str:
    names = ["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "u1", "ü2", "CLUSTER"] + (["DELAY"] if delay else [])
    entries = []
    for _ in range(rng.randrange(6)):
        name = rng.choice(names)
        value = {
            "DELAY": lambda: rng.choice(["0", "2", "30", "x"]),
            "WAIT": lambda: rng.choice(["true", "false"]),
        }.get(name, lambda: rng.choice(["TagA", "k1 k2", "v", "€"]))()
        entries.append(f"{name}{NV}{value}")
    if rng.random() < 0.2:
        entries.append(rng.choice(["", "junk", f"{NV}x", f"n{NV}"]))
    return SEP.join(entries) + (SEP if rng.random() < 0.3 else "")  # the C++ client's trailing \x02


def broker_send_rules(
    raw: str, topic: str, queue_id: int, *, half: bool, dead_letter: bool
) -> tuple[str, str, int]:
    """(properties, topic, queue) a send stores: CLUSTER added; a retry past its maximum goes to the
    group's DLQ queue 0 without DELAY; a half message gets REAL_TOPIC, REAL_QID and PGROUP and goes to
    the half topic queue 0, keeping WAIT; a plain message loses WAIT unless it is delayed."""
    edits = [("set", "CLUSTER", CLUSTER)]
    if dead_letter:
        topic, queue_id = "%DLQ%" + topic.removeprefix("%RETRY%"), 0
        edits.append(("remove", "DELAY", ""))
    if half:
        edits += [
            ("set", "REAL_TOPIC", topic),
            ("set", "REAL_QID", str(queue_id)),
            ("default", "PGROUP", "PG"),
        ]
        topic, queue_id = "RMQ_SYS_TRANS_HALF_TOPIC", 0
    want = ref_rewrite(raw, edits, not half, True, topic, queue_id, 0)
    if want.level is not None:
        topic, queue_id = SCHEDULE_TOPIC, want.level - 1
    return want.properties, topic, queue_id


def test_every_kind_of_send_through_a_broker(tmp_path: Path) -> None:
    rng = random.Random(16)

    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            client = await Client().connect(broker.port)
            store = broker.store

            def latest(topic: str, queue_id: int) -> StoredMessage:
                got = store.get_messages(topic, queue_id, store.max_offset(topic, queue_id) - 1, 1)
                assert got, (topic, queue_id)
                return got[0]

            async def send(
                topic: str, props: str, queue_id: int = 1, **extra: object
            ) -> tuple[RemotingCommand, list[StoredMessage]]:
                r = await client.call(RC.SEND_MESSAGE, send_ext(topic, queue_id, props, **extra))
                assert r.code == R.SUCCESS, r.remark
                found = [store.read(int(m[16:], 16)) for m in r.ext["msgId"].split(",")]
                return r, [m for m in found if m is not None]

            # Halves and their commits have a topic of their own: delayed plain messages are
            # delivered into PipeT meanwhile, and a commit is looked up as its queue's newest record.
            plain: list[StoredMessage] = []
            halves: list[tuple[RemotingCommand, StoredMessage]] = []
            for i in range(600):
                kind = rng.choice(["plain", "plain", "retry", "half", "batch", "back", "commit"])
                if kind == "plain" or (kind == "back" and not plain):
                    raw = random_properties(rng)
                    _, (m,) = await send("PipeT", raw)
                    assert (m.properties_string, m.topic, m.queue_id) == broker_send_rules(
                        raw, "PipeT", 1, half=False, dead_letter=False
                    ), i
                    if m.topic == "PipeT":
                        plain.append(m)
                elif kind == "retry":
                    raw, times = random_properties(rng), rng.randrange(20)
                    _, (m,) = await send(f"%RETRY%{GROUP}", raw, 0, reconsumeTimes=times)
                    want = broker_send_rules(
                        raw, f"%RETRY%{GROUP}", 0, half=False, dead_letter=times >= MAX_RECONSUME
                    )
                    assert (m.properties_string, m.topic, m.queue_id, m.reconsume_times) == (*want, times), i
                elif kind == "half" or (kind == "commit" and not halves):
                    raw = (
                        random_properties(rng, delay=False)
                        + SEP
                        + f"TRAN_MSG{NV}{rng.choice(['true', 'TRUE'])}"
                    )
                    if rng.random() < 0.5:
                        raw += f"{SEP}PGROUP{NV}OtherPG"
                    r, (m,) = await send("PipeTx", raw, sysFlag=rng.choice([0, 0x4]))
                    want = broker_send_rules(raw, "PipeTx", 1, half=True, dead_letter=False)
                    assert (m.properties_string, m.topic, m.queue_id, m.sys_flag & 0xC) == (*want, 0), i
                    halves.append((r, m))
                elif kind == "batch":
                    items = [
                        (f"b{j}".encode(), random_properties(rng, delay=False))
                        for j in range(rng.randrange(1, 4))
                    ]
                    outer = random_properties(rng, delay=False)
                    r = await client.call(
                        RC.SEND_BATCH_MESSAGE, send_ext("PipeT", 1, outer, batch="true"), batch_body(items)
                    )
                    assert r.code == R.SUCCESS, r.remark
                    shared = ref_rewrite(
                        outer, [("set", "CLUSTER", CLUSTER)], False, False, "PipeT", 1, 0
                    ).properties
                    got = [store.read(int(m[16:], 16)) for m in r.ext["msgId"].split(",")]
                    assert [m.properties_string if m else None for m in got] == [
                        ref_join(p, shared) for _, p in items
                    ], i
                elif kind == "back":
                    original = rng.choice(plain)
                    level = rng.choice([-1, 0, 0, 2])
                    back = ConsumerSendMsgBackRequestHeader(
                        offset=original.physical_offset, group=GROUP, delay_level=level
                    )
                    r = await client.call(RC.CONSUMER_SEND_MSG_BACK, back.to_ext())
                    assert r.code == R.SUCCESS, r.remark
                    # §11.2: RETRY_TOPIC and ORIGIN_MESSAGE_ID kept if there, WAIT=false, DELAY chosen,
                    # reconsumeTimes + 1; a DLQ copy keeps DELAY=0; then the store's delay rule.
                    dead = level < 0 or original.reconsume_times >= MAX_RECONSUME
                    delay = "0" if dead else str(level if level > 0 else 3 + original.reconsume_times)
                    edits = [
                        ("default", "RETRY_TOPIC", original.topic),
                        ("set", "WAIT", "false"),
                        ("set", "DELAY", delay),
                        ("default", "ORIGIN_MESSAGE_ID", original.msg_id),
                    ]
                    target = f"%DLQ%{GROUP}" if dead else f"%RETRY%{GROUP}"
                    want = ref_rewrite(
                        original.properties_string, edits, False, True, target, 0, original.sys_flag
                    )
                    topic, queue_id = (target, 0) if want.level is None else (SCHEDULE_TOPIC, want.level - 1)
                    m = latest(topic, queue_id)
                    assert (m.properties_string, m.reconsume_times, m.body) == (
                        want.properties,
                        original.reconsume_times + 1,
                        original.body,
                    ), i
                else:  # commit a half message: §12, properties copied as they are
                    r, half = halves.pop(rng.randrange(len(halves)))
                    end = EndTransactionRequestHeader(
                        producer_group=half.properties["PGROUP"],
                        tran_state_table_offset=half.queue_offset,
                        commit_log_offset=half.physical_offset,
                        commit_or_rollback=0x8,
                    )
                    assert (await client.call(RC.END_TRANSACTION, end.to_ext())).code == R.SUCCESS
                    m = latest("PipeTx", 1)
                    assert (m.properties_string, m.sys_flag & 0xC, m.prepared_transaction_offset) == (
                        half.properties_string,
                        0x8,
                        half.physical_offset,
                    ), i
            await client.close()

    asyncio.run(asyncio.wait_for(main(), 120))
