"""Timer messages on the real Apache RocketMQ 5.3.3 broker, through the official 5.3.3 remoting client
(tests/interop/java5, `io.ferromq.interop5.Timers`): what a delivered timer message looks like and what a
delay beyond `timerMaxDelaySec` is answered. Java only: ferromq does not run timers yet; these tests pin
the behaviour ferromq is to match. Run with `-s` to see the messages as sent, delivered and stored."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from apache_rocketmq import ROCKETMQ_5_VERSION, ApacheRocketMQ, have_java, start_rocketmq

from tests.interop.java5build import build_interop5_jar, run_driver

pytestmark = [
    pytest.mark.skipif(not have_java(), reason="the 5.3.3 timer tests need `java` and `mvn` on PATH"),
    # The first run resolves the broker's jars and builds the driver (Maven Central).
    pytest.mark.timeout(600),
]

RUN = uuid.uuid4().hex[:8]
COMMITLOG_FILE_SIZE = 1 << 20
PRECISION_MS = 1000  # timerPrecisionMs, the 5.3.3 default
MAX_DELAY_SEC = 259200  # timerMaxDelaySec, the 5.3.3 default
TIMER_TOPIC = "rmq_sys_wheel_timer"
# Added by the pulling client (PullAPIWrapper), not stored by the broker.
CLIENT_ADDED = {"MIN_OFFSET", "MAX_OFFSET"}
ILLEGAL_REMARK = (
    "timer message illegal, the delay time should not be bigger than the max delay "
    f"{MAX_DELAY_SEC * 1000}ms; or if set del msg, the delay time should be bigger than the current time"
)


def rounded(deliver_ms: int) -> int:
    """The deliver time the broker keeps (HookUtils): rounded down to timerPrecisionMs, and one precision
    earlier when it is a multiple already."""
    return (deliver_ms - 1) // PRECISION_MS * PRECISION_MS


@pytest.fixture(scope="module")
def rocketmq5(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheRocketMQ]:
    root = tmp_path_factory.mktemp("rocketmq5")
    mq = start_rocketmq(
        root, {"mappedFileSizeCommitLog": str(COMMITLOG_FILE_SIZE)}, version=ROCKETMQ_5_VERSION
    )
    try:
        yield mq
    finally:
        mq.stop(kill=True)  # a reference broker: nothing reads its store afterwards


@pytest.fixture(scope="module")
def jar5() -> Path:
    return build_interop5_jar()


def timers(
    jar: Path, mq: ApacheRocketMQ, *args: str, timeout: float = 90
) -> tuple[int, list[dict[str, Any]]]:
    """One run of the driver; its exit code and the JSON objects it printed."""
    r = run_driver(jar, mq.root, "Timers", *args, timeout=timeout)
    if r.code not in (0, 1):
        pytest.fail(
            f"Timers {' '.join(args)} exited {r.code}\n{r.stdout}\n{r.stderr[-3000:]}\n{mq.log_tail()}"
        )
    return r.code, r.out


def stored_messages(store: Path, end: int) -> list[dict[str, Any]]:
    """The message records of the first CommitLog file that start before `end` (read beside the running
    broker, so only records known to be whole): topic, queue, commit log offset, store time and the
    properties exactly as the broker stored them (in its order)."""
    data = (store / "commitlog" / f"{0:020d}").read_bytes()
    found, pos = [], 0
    while pos < end and pos + 8 <= len(data):
        size, magic = struct.unpack_from(">ii", data, pos)
        if size <= 0 or magic not in (-626843481, -626843477):  # v1 / v2 (2-byte topic length)
            break
        queue_id, _flag, queue_offset, _phys, sys_flag = struct.unpack_from(">iiqqi", data, pos + 12)
        p = pos + 48  # past the born timestamp
        p += 20 if sys_flag & 0x10 else 8  # born host
        (store_ts,) = struct.unpack_from(">q", data, p)
        p += 8 + (20 if sys_flag & 0x20 else 8) + 4 + 8  # store timestamp, store host, reconsume, prepared
        (body_len,) = struct.unpack_from(">i", data, p)
        p += 4 + body_len
        if magic == -626843481:
            (topic_len,) = struct.unpack_from(">B", data, p)
            p += 1
        else:
            (topic_len,) = struct.unpack_from(">H", data, p)
            p += 2
        topic = data[p : p + topic_len].decode()
        p += topic_len
        (props_len,) = struct.unpack_from(">H", data, p)
        raw = data[p + 2 : p + 2 + props_len].decode()
        props = dict(kv.split("\x01", 1) for kv in raw.split("\x02") if kv)
        found.append(
            {"topic": topic, "queueId": queue_id, "queueOffset": queue_offset, "commitLogOffset": pos}
            | {"storeTimestamp": store_ts, "properties": props}
        )
        pos += size
    return found


def test_timer_delay_sec_is_delivered_at_its_time(rocketmq5: ApacheRocketMQ, jar5: Path) -> None:
    topic = f"Timer5_{RUN}"
    code, sent = timers(jar5, rocketmq5, "send", rocketmq5.namesrv, topic, "5", "TIMER_DELAY_SEC", "3")
    assert code == 0 and len(sent) == 5, sent
    for s in sent:
        # 5.x reserves TIMER_* for putUserProperty; the client's own setter writes the same property.
        assert s.get("status") == "SEND_OK" and s["via"] == "setDelayTimeSec", (s, rocketmq5.log_tail())
    code, got = timers(jar5, rocketmq5, "consume", rocketmq5.namesrv, topic, f"G5_{RUN}", "5", "60000")
    assert code == 0 and len(got) == 5, (got, rocketmq5.log_tail())
    by_body = {m["body"]: m for m in got}
    assert sorted(by_body) == [f"timer-{i}" for i in range(5)]

    last = max(m["commitLogOffset"] for m in got)
    stored = {m["commitLogOffset"]: m for m in stored_messages(rocketmq5.store, last + 1)}
    print(f"\nJava {ROCKETMQ_5_VERSION}: a TIMER_DELAY_SEC=3 message, as sent and as delivered")
    for s in sent:
        m = by_body[f"timer-{s['i']}"]
        props = m["properties"]
        # The broker computes now + 3 s on arrival (between the client's send and its answer) and keeps
        # it rounded down to timerPrecisionMs in TIMER_OUT_MS.
        earliest = rounded(s["sentAtMs"] + 3000)
        assert earliest <= int(props["TIMER_OUT_MS"]) <= rounded(s["returnedAtMs"] + 3000), (s, m)
        # Delivered (stored again in the real topic, then received) no earlier than that.
        assert m["storeTimestamp"] >= int(props["TIMER_OUT_MS"]) >= earliest, (s, m)
        assert m["receivedAtMs"] >= earliest and int(props["TIMER_DEQUEUE_MS"]) >= earliest, (s, m)
        assert m["topic"] == topic and props["REAL_TOPIC"] == topic and props["REAL_QID"] == str(m["queueId"])
        assert m["msgId"] == s["msgId"] == props["UNIQ_KEY"] and props["TIMER_DELAY_SEC"] == "3"
        # The delivered message as the broker stored it: what the consumer saw less the pull's additions.
        on_disk = stored[m["commitLogOffset"]]
        assert on_disk["topic"] == topic and on_disk["properties"] == {
            k: v for k, v in props.items() if k not in CLIENT_ADDED
        }, on_disk
        print(f"sent {s}\ndelivered {m}")
    wheel = [
        m for m in stored.values() if m["topic"] == TIMER_TOPIC and m["properties"].get("REAL_TOPIC") == topic
    ]
    assert len(wheel) == 5 and {m["queueId"] for m in wheel} == {0}, wheel
    print(f"as stored in {TIMER_TOPIC}: {wheel[0]}")
    print(f"as stored in {topic}: {stored[by_body['timer-0']['commitLogOffset']]}")


def test_timer_delay_beyond_max_is_refused(rocketmq5: ApacheRocketMQ, jar5: Path) -> None:
    topic = f"Timer5Max_{RUN}"
    code, sent = timers(
        jar5, rocketmq5, "send", rocketmq5.namesrv, topic, "1", "TIMER_DELAY_SEC", str(MAX_DELAY_SEC + 1)
    )
    assert code == 0 and len(sent) == 1, sent
    print(f"\nJava {ROCKETMQ_5_VERSION}: TIMER_DELAY_SEC={MAX_DELAY_SEC + 1} -> {sent[0]}")
    assert sent[0]["error"] == 13 and sent[0]["remark"] == ILLEGAL_REMARK, sent  # MESSAGE_ILLEGAL
