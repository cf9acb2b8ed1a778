"""The send pipeline (`MessageStore.send` / `send_batch`: one Rust call that rewrites the raw
properties, appends and dispatches) against a reference encoder written here from the facts sheet
(reference/rocketmq-4x-wire-and-store.md): §6.3 properties, §6.1 the stored record, §11.1 the
delay rewrite, §4.4 step 6 WAIT, §4.3 batch bodies and the joining of a batch's properties. On
thousands of generated sends (hypothesis, derandomized), every stored byte must be the reference's.

The pipeline's own rules, which the facts sheet leaves open (Java keeps properties in a HashMap, so
its order on disk is arbitrary), are the reference's too: a repeated name keeps its first position
and takes its last value; a name an edit adds goes last; the delay rewrite puts DELAY, REAL_TOPIC and
REAL_QID last; a put with no edits, no WAIT drop and no delay stores the string as it came; an
IPv4-mapped IPv6 born host is stored as IPv4."""

from __future__ import annotations

import ipaddress
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
from ferromq.store import MessageStore, PropertyEdits

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
        with pytest.raises(MessageIllegalError, match="at byte 30: properties length -3"):
            store.send_batch("T", 0, good + negative, "", PropertyEdits())
        assert store.max_offset("T", 0) == 0
