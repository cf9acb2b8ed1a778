"""Timer messages and POP consumption: ferromq against Apache RocketMQ 5.3.3 in the same run.

Both brokers get the same broker.conf (RocketMQ's default file sizes, ASYNC_FLUSH, timerPrecisionMs 1000,
8 queues per topic) and the same client: this process, speaking the remoting protocol with ferromq's own
connection (`ferromq.remoting.connection`), many requests in flight. Each case starts a fresh broker on a
fresh store, and only one broker runs at a time: ferromq as `ferromq serve` (benchlib.serving), the Java
one as a 5.3.3 name server plus broker JVM (tools/apache_rocketmq.py, -Xms512m -Xmx512m, G1).

1. lateness   N timer messages (TIMER_DELIVER_MS) with deliver times spread evenly over a W s window that
              starts after the last send was answered (the lead is sized from a warm-up of plain sends).
              Every delivered message is read back by pulling the real topic; its lateness is its store
              timestamp there minus the requested deliver time, and minus the end of its slot
              (TIMER_OUT_MS + timerPrecisionMs: both brokers round a deliver time down to the slot it
              waits in and deliver the slot once it has passed). p50/p99/max of both, early (< 0 against
              the requested time: must be 0), missing, duplicates, broker CPU over the window.
2. footprint  M timer messages due 1-2 h ahead: broker process RSS (VmRSS, RssAnon, RssFile from
              /proc/PID/status; for Java the broker JVM) and the store's disk use (allocated blocks of
              commitlog/, consumequeue/, timerlog/, timerwheel, index/) once all are in the timer wheel:
              both brokers write config/timercheck (Java's layout) every timerFlushIntervalMs, and its
              lastTimerQueueOffset reaching M says the enqueue is done; then RSS is sampled until it is
              stable (bounded waits). The issue's goal: <= 200 MB RSS for 1 M pending.
3. pop        K messages of 1 KiB pre-sent to an 8-queue topic, drained by C concurrent pop consumers
              (a connection each; POP_MESSAGE maxMsgNums 32, queueId -1, then one ACK_MESSAGE per message
              with the receipt built from the reply as the Java client builds it, all in flight at once):
              msg/s and broker CPU per message (utime+stime from /proc/PID/stat around the drain; also net
              of the broker's idle CPU rate measured just before). The issue's goal: CPU per pop+ack
              <= 0.5x Java's.

4. pop_follow Pop consumers that keep up: the C consumers pop (pollTime 5 s) and ack while one client
              sends 1 KiB messages at R msg/s for S s, after a warm-up at that rate: most pops find
              nothing and wait (long polling) for the next message. End-to-end latency (a send's start
              to the first pop answer that carries the message) p50/p99/max and broker CPU per message
              (send + pop + ack).

    .venv/bin/python benches/timer_bench.py [--quick] [--only lateness,footprint,pop,pop_follow]
        [--brokers ferromq,rocketmq] [--timers N] [--window S] [--pending M] [--pop K] [--rate R]
        [--seconds S]

Defaults: N = 100,000 over 60 s, M = 1,000,000, K = 200,000 (about 6.5 minutes in all on 2 vCPUs);
--quick: N = 10,000 over 20 s, M = 100,000, K = 20,000 (about 3.5 minutes). Prints one table per case
and writes benches/results/timer_pop_vs_rocketmq.json (--json). Needs `java` and `mvn` for the Java
broker (its jars come from Maven Central on first use).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import secrets
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tools"))

import apache_rocketmq  # noqa: E402  (tools/ is not a package)
from benchlib import (  # noqa: E402
    client_cpu,
    cpu_seconds,
    free_port,
    loadavg,
    ratio,
    render,
    serving,
    write_results,
)

from ferromq.message import StoredMessage, decode_messages  # noqa: E402
from ferromq.protocol.codes import RequestCode as RC  # noqa: E402
from ferromq.protocol.codes import ResponseCode as R  # noqa: E402
from ferromq.protocol.command import RemotingCommand  # noqa: E402
from ferromq.remoting.connection import Connection, open_connection  # noqa: E402

BROKERS = ("ferromq", "rocketmq")
PRECISION_MS = 1000
BROKER_NAME = "broker-a"
TIMER_TOPIC = "rmq_sys_wheel_timer"
QUEUES = 8
# Both brokers get these keys (ferromq logs and ignores the few it has no use for).
CONF = {
    "brokerClusterName": "DefaultCluster",
    "brokerName": BROKER_NAME,
    "brokerId": "0",
    "brokerIP1": "127.0.0.1",
    "brokerRole": "ASYNC_MASTER",
    "flushDiskType": "ASYNC_FLUSH",
    "autoCreateTopicEnable": "true",
    "autoCreateSubscriptionGroup": "true",
    "defaultTopicQueueNums": str(QUEUES),
    "timerWheelEnable": "true",
    "timerPrecisionMs": str(PRECISION_MS),
    # RocketMQ's defaults, written out so both surely use the same file sizes.
    "mappedFileSizeCommitLog": str(1 << 30),
    "mappedFileSizeConsumeQueue": str(300_000 * 20),
    "mappedFileSizeTimerLog": str(100 * 1024 * 1024),
    "fileReservedTime": "72",
    "deleteWhen": "04",
    "diskMaxUsedSpaceRatio": "95",
}
START_TIMEOUT = 180.0
SEND_TIMEOUT = 30.0
BUSY_RETRIES = 200


# -- brokers --------------------------------------------------------------------------------------


@dataclass
class Broker:
    kind: str
    addr: str
    pid: int
    store: Path
    log_errors: Callable[[], list[str]]


@contextlib.contextmanager
def running(kind: str, work: Path) -> Iterator[Broker]:
    """A fresh broker of `kind` on a fresh store under `work`, stopped (by its PID) after."""
    work.mkdir(parents=True, exist_ok=True)
    store = work / "store"
    if kind == "ferromq":
        conf = work / "broker.conf"
        conf.write_text("".join(f"{k}={v}\n" for k, v in CONF.items()))
        port = free_port()
        log = work / "ferromq.log"
        with serving(conf, log, port, free_port(), args=["--store", str(store)]) as proc:

            def errors() -> list[str]:
                text = log.read_text(errors="replace")
                return [ln for ln in text.splitlines() if " ERROR " in ln or ln.startswith("Traceback")][:20]

            yield Broker(kind, f"127.0.0.1:{port}", proc.pid, store, errors)
    else:
        mq = apache_rocketmq.start_rocketmq(
            work,
            {**CONF, "storePathRootDir": str(store), "storePathCommitLog": str(store / "commitlog")},
            timeout=START_TIMEOUT,
            version=apache_rocketmq.ROCKETMQ_5_VERSION,
        )
        try:
            yield Broker(kind, mq.broker_addr, mq.broker_pid, mq.store, lambda: mq.log_errors()[:20])
        finally:
            mq.stop()


def proc_status(pid: int) -> dict[str, int]:
    """KiB values of /proc/PID/status that say how much memory it holds."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "Threads"):
            out[key] = int(value.split()[0])
    return out


def disk_use(store: Path) -> dict[str, int]:
    """Allocated bytes (st_blocks, as du counts) of the store's parts, and their total."""
    parts = {
        "commitlog": store / "commitlog",
        "consumequeue": store / "consumequeue",
        "timerlog": store / "timerlog",
        "timerwheel": store / "timerwheel",
        "index": store / "index",
    }
    out: dict[str, int] = {}
    for name, path in parts.items():
        total = 0
        if path.is_file():
            total = path.stat().st_blocks * 512
        elif path.is_dir():
            for root, _dirs, files in os.walk(path):
                for f in files:
                    with contextlib.suppress(OSError):
                        total += (Path(root) / f).stat().st_blocks * 512
        out[name] = total
    out["total"] = sum(out.values())
    return out


# -- the client -----------------------------------------------------------------------------------


class Client:
    """Connections to one broker; requests are JSON remoting commands as the Java client sends them."""

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self.conns: list[Connection] = []

    async def open(self, n: int = 1) -> Client:
        host, port = self.addr.rsplit(":", 1)

        async def ignore(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
            return None

        for _ in range(n):
            self.conns.append(await open_connection(host, int(port), ignore, timeout=10))
        return self

    async def call(
        self, code: int, ext: dict[str, Any], body: bytes = b"", conn: int = 0, timeout: float = SEND_TIMEOUT
    ) -> RemotingCommand:
        cmd = RemotingCommand(code=code, ext={k: str(v) for k, v in ext.items()}, body=body)
        return await self.conns[conn % len(self.conns)].request(cmd, timeout)

    async def close(self) -> None:
        for c in self.conns:
            with contextlib.suppress(Exception):
                await c.close()


async def create_topic(c: Client, topic: str) -> None:
    r = await c.call(
        RC.UPDATE_AND_CREATE_TOPIC,
        {
            "topic": topic,
            "defaultTopic": "TBW102",
            "readQueueNums": QUEUES,
            "writeQueueNums": QUEUES,
            "perm": 6,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": "false",
        },
    )
    if r.code != R.SUCCESS:
        raise RuntimeError(f"creating {topic}: {r.code} {r.remark}")


def send_ext(topic: str, queue_id: int, props: str) -> dict[str, Any]:
    return {
        "producerGroup": "TimerBenchProducer",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": QUEUES,
        "queueId": queue_id,
        "sysFlag": 0,
        "bornTimestamp": int(time.time() * 1000),
        "flag": 0,
        "properties": props,
        "reconsumeTimes": 0,
        "unitMode": "false",
        "batch": "false",
    }


@dataclass
class Sent:
    count: int
    seconds: float
    busy_retries: int
    errors: list[str]

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0


async def send_all(
    c: Client,
    n: int,
    make: Callable[[int], tuple[int, dict[str, Any], bytes]],
    window: int = 256,
) -> Sent:
    """Requests make(0..n-1) (code, ext, body) with `window` in flight over the client's connections;
    SYSTEM_BUSY (a full send queue, Java's TIMEOUT_CLEAN_QUEUE) is retried after a pause."""
    it = iter(range(n))
    done = 0
    busy = 0
    errors: list[str] = []

    async def worker() -> None:
        nonlocal done, busy
        for i in it:
            code, ext, body = make(i)
            for _attempt in range(BUSY_RETRIES):
                r = await c.call(code, ext, body, conn=i)
                if r.code == R.SUCCESS:
                    done += 1
                    break
                if r.code in (R.SYSTEM_BUSY, R.SERVICE_NOT_AVAILABLE):
                    busy += 1
                    await asyncio.sleep(0.05)
                    continue
                errors.append(f"{r.code} {r.remark}")
                break

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(min(window, n))))
    return Sent(done, time.monotonic() - started, busy, errors[:10])


async def max_offsets(c: Client, topic: str, queues: int = QUEUES) -> list[int]:
    out = []
    for q in range(queues):
        r = await c.call(RC.GET_MAX_OFFSET, {"topic": topic, "queueId": q})
        out.append(int(r.ext.get("offset", 0)) if r.code == R.SUCCESS else 0)
    return out


async def pull_all(c: Client, topic: str, group: str) -> list[StoredMessage]:
    """Every message of the topic's queues, pulled from offset 0 (8 queues at once)."""
    highs = await max_offsets(c, topic)

    async def one(q: int) -> list[StoredMessage]:
        got: list[StoredMessage] = []
        offset = 0
        while offset < highs[q]:
            r = await c.call(
                RC.PULL_MESSAGE,
                {
                    "consumerGroup": group,
                    "topic": topic,
                    "queueId": q,
                    "queueOffset": offset,
                    "maxMsgNums": 32,
                    "sysFlag": 4,  # FLAG_SUBSCRIPTION: the subscription is in this request
                    "commitOffset": 0,
                    "suspendTimeoutMillis": 0,
                    "subscription": "*",
                    "subVersion": 0,
                    "expressionType": "TAG",
                },
                conn=q,
            )
            if r.code == R.SUCCESS:
                msgs = decode_messages(r.body)
                got += msgs
                offset = int(r.ext.get("nextBeginOffset", offset + len(msgs)))
            elif r.code in (R.PULL_OFFSET_MOVED, R.PULL_RETRY_IMMEDIATELY, R.PULL_NOT_FOUND):
                nxt = int(r.ext.get("nextBeginOffset", offset))
                if nxt <= offset:
                    break
                offset = nxt
            else:
                raise RuntimeError(f"pull {topic}/{q}@{offset}: {r.code} {r.remark}")
        return got

    parts = await asyncio.gather(*(one(q) for q in range(QUEUES)))
    return [m for p in parts for m in p]


def read_timercheck(store: Path) -> int | None:
    """lastTimerQueueOffset of config/timercheck (Java's TimerCheckpoint layout, which ferromq writes
    too): the next timer-topic offset to take into the wheel."""
    try:
        data = (store / "config" / "timercheck").read_bytes()
    except OSError:
        return None
    return struct.unpack_from(">q", data, 16)[0] if len(data) >= 24 else None


def pct(values: list[int], p: float) -> int | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def pct_ms(seconds: list[float], p: float) -> float | None:
    """The p-th percentile of durations in seconds, in ms (p 100: the max)."""
    if not seconds:
        return None
    ordered = sorted(seconds)
    return round(ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000, 2)


def uniq(prefix: str, i: int) -> str:
    return f"{prefix}{i:024X}"


# -- 1. lateness ----------------------------------------------------------------------------------


async def lateness_case(b: Broker, n: int, window_s: float, seed: int) -> dict[str, Any]:
    topic, warm_topic = "TimerLateT", "TimerWarmT"
    c = await Client(b.addr).open(4)
    try:
        await create_topic(c, topic)
        await create_topic(c, warm_topic)
        prefix = secrets.token_hex(4).upper()
        body_pad = b"x" * 90

        # Warm-up: plain sends, to size the lead before the window (and warm a JIT).
        warm_n = max(2000, n // 10)
        warm = await send_all(
            c,
            warm_n,
            lambda i: (
                RC.SEND_MESSAGE,
                send_ext(warm_topic, i % QUEUES, f"UNIQ_KEY\x01{uniq('AAAAAAAA', i)}"),
                b"%010d" % i + body_pad,
            ),
        )
        lead_s = 2.0 * n / max(warm.rate, 1.0) + 5.0
        window_ms = int(window_s * 1000)
        start_ms = int(time.time() * 1000 + lead_s * 1000)
        order = list(range(n))
        random.Random(seed).shuffle(order)
        # Deliver times spread evenly over the window, sent in a shuffled order.
        deliver = [start_ms + order[i] * window_ms // n for i in range(n)]

        def timer_msg(i: int) -> tuple[int, dict[str, Any], bytes]:
            props = f"TIMER_DELIVER_MS\x01{deliver[i]}\x02UNIQ_KEY\x01{uniq(prefix, i)}"
            return RC.SEND_MESSAGE, send_ext(topic, i % QUEUES, props), b"%010d" % i + body_pad

        cpu0, load0 = cpu_seconds(b.pid), loadavg()
        sent = await send_all(c, n, timer_msg)
        sent_at_ms = time.time() * 1000
        cpu_sent = cpu_seconds(b.pid)
        margin_s = (start_ms - sent_at_ms) / 1000
        print(
            f"  [{b.kind}] {sent.count} timers sent in {sent.seconds:.1f} s ({sent.rate:,.0f}/s, "
            f"{sent.busy_retries} busy retries); window opens {margin_s:.1f} s after the last send",
            flush=True,
        )

        # Delivery progress once a second, until all are in the real topic or a bounded wait ran out.
        end_ms = start_ms + window_ms
        deadline = end_ms / 1000 + 60 + n / 5000
        progress: list[tuple[float, int]] = []
        delivered_count = 0
        while time.time() < deadline:
            delivered_count = sum(await max_offsets(c, topic))
            now = time.time()
            if now * 1000 >= start_ms:
                progress.append((round(now - start_ms / 1000, 1), delivered_count))
            if delivered_count >= sent.count:
                break
            await asyncio.sleep(1.0 if now * 1000 >= start_ms - 1000 else min(5.0, start_ms / 1000 - now))
        all_in_ms = time.time() * 1000
        cpu1, load1 = cpu_seconds(b.pid), loadavg()

        msgs = await pull_all(c, topic, "TimerLateReader")
        late: list[int] = []
        late_slot: list[int] = []
        seen: dict[int, int] = {}
        no_out = 0
        for m in msgs:
            i = int(m.body[:10])
            seen[i] = seen.get(i, 0) + 1
            if seen[i] > 1:
                continue
            late.append(m.store_timestamp - deliver[i])
            out = m.properties.get("TIMER_OUT_MS")
            if out is None:
                no_out += 1
                out_ms = (deliver[i] - 1) // PRECISION_MS * PRECISION_MS
            else:
                out_ms = int(out)
            late_slot.append(m.store_timestamp - (out_ms + PRECISION_MS))
        return {
            "broker": b.kind,
            "messages": n,
            "window_s": window_s,
            "sent": sent.count,
            "send_seconds": round(sent.seconds, 2),
            "send_msgs_per_s": round(sent.rate),
            "send_busy_retries": sent.busy_retries,
            "send_errors": sent.errors,
            "warmup_msgs_per_s": round(warm.rate),
            "window_opened_after_last_send_s": round(margin_s, 2),
            "delivered": len(seen),
            "missing": n - len(seen),
            "duplicates": sum(v - 1 for v in seen.values()),
            "early": sum(1 for x in late if x < 0),
            "early_vs_slot_end": sum(1 for x in late_slot if x < 0),
            "without_timer_out_ms": no_out,
            "late_ms": {"p50": pct(late, 50), "p99": pct(late, 99), "max": max(late, default=None)},
            "late_vs_slot_end_ms": {
                "p50": pct(late_slot, 50),
                "p99": pct(late_slot, 99),
                "max": max(late_slot, default=None),
                "min": min(late_slot, default=None),
            },
            "last_delivered_after_window_end_ms": (
                max(m.store_timestamp for m in msgs) - end_ms if msgs else None
            ),
            "all_in_after_window_end_ms": round(all_in_ms - end_ms),
            "broker_cpu_s_sending": round(cpu_sent - cpu0, 2),
            "broker_cpu_s_waiting_and_delivering": round(cpu1 - cpu_sent, 2),
            "progress": progress,
            "loadavg_start": load0,
            "loadavg_end": load1,
            "broker_log_errors": b.log_errors(),
        }
    finally:
        await c.close()


# -- 2. footprint ---------------------------------------------------------------------------------


async def stable_rss(pid: int, seconds: float, tolerance_kib: int = 2048) -> tuple[dict[str, int], float]:
    """Samples VmRSS once a second until 5 samples in a row are within `tolerance_kib` (or `seconds`
    passed); the last sample and how long it took."""
    started = time.monotonic()
    recent: list[int] = []
    s = proc_status(pid)
    while time.monotonic() - started < seconds:
        s = proc_status(pid)
        recent = [*recent[-4:], s["VmRSS"]]
        if len(recent) == 5 and max(recent) - min(recent) <= tolerance_kib:
            break
        await asyncio.sleep(1.0)
    return s, time.monotonic() - started


async def footprint_case(b: Broker, m: int) -> dict[str, Any]:
    topic = "TimerPendingT"
    c = await Client(b.addr).open(4)
    try:
        await create_topic(c, topic)
        await asyncio.sleep(3)
        idle, _ = await stable_rss(b.pid, 20)
        disk_idle = disk_use(b.store)
        prefix = secrets.token_hex(4).upper()
        base = int(time.time() * 1000) + 3_600_000
        body = b"p" * 100

        def timer_msg(i: int) -> tuple[int, dict[str, Any], bytes]:
            # Due 1-2 h ahead, spread over the hour's 3600 slots.
            props = f"TIMER_DELIVER_MS\x01{base + i * 3_600_000 // m}\x02UNIQ_KEY\x01{uniq(prefix, i)}"
            return RC.SEND_MESSAGE, send_ext(topic, i % QUEUES, props), body

        cpu0, load0 = cpu_seconds(b.pid), loadavg()
        sent = await send_all(c, m, timer_msg)
        print(
            f"  [{b.kind}] {sent.count} pending timers sent in {sent.seconds:.1f} s ({sent.rate:,.0f}/s, "
            f"{sent.busy_retries} busy retries)",
            flush=True,
        )
        sent_at = time.monotonic()
        # Enqueued into the wheel: the checkpointed timer-topic offset reaches what was stored there.
        stored = (await max_offsets(c, TIMER_TOPIC, 1))[0]
        checkpointed = read_timercheck(b.store)
        deadline = sent_at + 120 + m / 2000
        while time.monotonic() < deadline:
            checkpointed = read_timercheck(b.store)
            if checkpointed is not None and checkpointed >= stored:
                break
            await asyncio.sleep(0.5)
        enqueue_s = time.monotonic() - sent_at
        peak_during = proc_status(b.pid)
        after, settle_s = await stable_rss(b.pid, 60)
        cpu1, load1 = cpu_seconds(b.pid), loadavg()
        disk = disk_use(b.store)
        return {
            "broker": b.kind,
            "pending": m,
            "sent": sent.count,
            "send_seconds": round(sent.seconds, 2),
            "send_msgs_per_s": round(sent.rate),
            "send_busy_retries": sent.busy_retries,
            "send_errors": sent.errors,
            "timer_topic_stored": stored,
            "timercheck_queue_offset": checkpointed,
            "all_enqueued": checkpointed is not None and checkpointed >= stored >= m,
            "enqueued_seconds_after_last_send": round(enqueue_s, 1),
            "rss_settle_seconds": round(settle_s, 1),
            "idle_kib": idle,
            "loaded_kib": after,
            "status_when_enqueued_kib": peak_during,
            "rss_mib": round(after["VmRSS"] / 1024, 1),
            "rss_anon_mib": round(after["RssAnon"] / 1024, 1),
            "rss_file_mib": round(after["RssFile"] / 1024, 1),
            "rss_growth_mib": round((after["VmRSS"] - idle["VmRSS"]) / 1024, 1),
            "anon_growth_mib": round((after["RssAnon"] - idle["RssAnon"]) / 1024, 1),
            "hwm_mib": round(after["VmHWM"] / 1024, 1),
            "disk_bytes_idle": disk_idle,
            "disk_bytes": disk,
            "broker_cpu_s": round(cpu1 - cpu0, 2),
            "loadavg_start": load0,
            "loadavg_end": load1,
            "broker_log_errors": b.log_errors(),
        }
    finally:
        await c.close()


# -- 3. pop ---------------------------------------------------------------------------------------


V2_FIELDS = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "m": "batch",
}


def batch_body(items: list[tuple[bytes, str]]) -> bytes:
    """A SEND_BATCH_MESSAGE body (MessageDecoder.encodeMessages)."""
    out = bytearray()
    for body, props in items:
        p = props.encode()
        out += struct.pack(">iiiii", 20 + len(body) + 2 + len(p), 0, 0, 0, len(body)) + body
        out += struct.pack(">h", len(p)) + p
    return bytes(out)


def receipt(ext: dict[str, str], starts: dict[str, str], m: StoredMessage) -> str:
    """A message's POP_CK as the Java client builds it (ExtraInfoUtil.buildExtraInfo)."""
    ck = m.properties.get("POP_CK")
    if ck is not None:
        return ck
    fields = [
        starts[f"0@{m.queue_id}"],
        ext["popTime"],
        ext["invisibleTime"],
        ext["reviveQid"],
        "0",
        BROKER_NAME,
        str(m.queue_id),
        str(m.queue_offset),
    ]
    return " ".join(fields)


async def presend(c: Client, topic: str, k: int, body_size: int) -> tuple[Sent, int]:
    """k messages of body_size B to the topic's 8 queues in batches of 32; waits (bounded) until the
    broker's consume queues show them all (Java dispatches them in the background)."""
    body = b"b" * body_size
    per_batch = 32
    batches = (k + per_batch - 1) // per_batch
    prefix = secrets.token_hex(4).upper()

    def batch(j: int) -> tuple[int, dict[str, Any], bytes]:
        lo, hi = j * per_batch, min(k, (j + 1) * per_batch)
        items = [(body, f"UNIQ_KEY\x01{uniq(prefix, i)}\x02TAGS\x01A") for i in range(lo, hi)]
        # SEND_BATCH_MESSAGE's header is SendMessageRequestHeaderV2's (one-letter names), as the
        # Java client sends it.
        full = {**send_ext(topic, j % QUEUES, ""), "batch": "true"}
        ext = {short: full[name] for short, name in V2_FIELDS.items()}
        return RC.SEND_BATCH_MESSAGE, ext, batch_body(items)

    sent = await send_all(c, batches, batch, window=32)
    if sent.errors:
        raise RuntimeError(f"pre-send to {topic} refused: {sent.errors}")
    deadline = time.monotonic() + 60 + k / 2000
    stored = sum(await max_offsets(c, topic))
    while stored < k and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        stored = sum(await max_offsets(c, topic))
    return sent, stored


@dataclass
class Drained:
    popped: int = 0
    acked: int = 0
    ack_failed: int = 0
    pop_requests: int = 0
    empty_pops: int = 0
    duplicates: int = 0
    missing: int = 0
    seconds: float = 0.0
    broker_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    loadavg_start: str = ""
    loadavg_end: str = ""


async def drain(
    b: Broker,
    pops: list[Client],
    topic: str,
    group: str,
    k: int,
    poll_ms: int | None = None,
    arrived: dict[str, float] | None = None,
) -> tuple[Drained, dict[str, Any]]:
    """One pop consumer per client until k messages are popped and acked (bounded): POP_MESSAGE of up to
    32, then an ACK_MESSAGE for each message, all in flight at once, then the next pop. `poll_ms`: every
    pop's pollTime (None: long polling near the end only); `arrived` gets each message's first pop
    answer time (perf_counter), by UNIQ_KEY."""
    d = Drained()
    seen: set[tuple[int, int]] = set()
    all_acked = asyncio.Event()
    codes: dict[int, int] = {}
    errors: list[str] = []

    async def consumer(cl: Client) -> None:
        while not all_acked.is_set():
            ext = {
                "consumerGroup": group,
                "topic": topic,
                "queueId": -1,
                "maxMsgNums": 32,
                "invisibleTime": 300_000,
                # Long polling near the end only, where a consumer may find the queues drained.
                "pollTime": poll_ms if poll_ms is not None else 1000 if d.popped >= k * 0.9 else 0,
                "bornTime": int(time.time() * 1000),
                "initMode": 0,
                "expType": "TAG",
                "exp": "*",
                "order": "false",
            }
            r = await cl.call(RC.POP_MESSAGE, ext, timeout=20)
            d.pop_requests += 1
            if r.code != R.SUCCESS or not r.body:
                codes[r.code] = codes.get(r.code, 0) + 1
                d.empty_pops += 1
                if r.code not in (R.POLLING_TIMEOUT, R.PULL_NOT_FOUND, R.NO_MESSAGE, R.SUCCESS):
                    if len(errors) < 5:
                        errors.append(f"pop: {r.code} {r.remark}")
                    await asyncio.sleep(0.05)
                continue
            msgs = decode_messages(r.body)
            d.popped += len(msgs)
            now = time.perf_counter()
            for msg in msgs if arrived is not None else ():
                arrived.setdefault(msg.properties.get("UNIQ_KEY", ""), now)
            starts: dict[str, str] = {}
            for entry in filter(None, r.ext.get("startOffsetInfo", "").split(";")):
                mark, qid, offset = entry.split(" ")
                starts[f"{mark}@{qid}"] = offset
            calls: list[Awaitable[RemotingCommand]] = []
            for msg in msgs:
                key = (msg.queue_id, msg.queue_offset)
                if key in seen:
                    d.duplicates += 1
                seen.add(key)
                ack = {
                    "consumerGroup": group,
                    "topic": topic,
                    "queueId": msg.queue_id,
                    "offset": msg.queue_offset,
                    "extraInfo": receipt(r.ext, starts, msg),
                }
                calls.append(cl.call(RC.ACK_MESSAGE, ack))
            for reply in await asyncio.gather(*calls):
                if reply.code == R.SUCCESS:
                    d.acked += 1
                else:
                    d.ack_failed += 1
                    if len(errors) < 5:
                        errors.append(f"ack: {reply.code} {reply.remark}")
            if d.acked >= k:
                all_acked.set()

    d.loadavg_start = loadavg()
    cpu0, ccpu0, t0 = cpu_seconds(b.pid), client_cpu(), time.monotonic()
    tasks = [asyncio.create_task(consumer(p)) for p in pops]
    waiter = asyncio.create_task(all_acked.wait())
    await asyncio.wait([waiter, *tasks], timeout=120 + k / 1000, return_when=asyncio.FIRST_COMPLETED)
    # Whatever came first: all acked, a consumer that crashed (reported below), or the time limit.
    d.seconds = time.monotonic() - t0
    d.broker_cpu_s = cpu_seconds(b.pid) - cpu0
    d.client_cpu_s = client_cpu() - ccpu0
    d.loadavg_end = loadavg()
    all_acked.set()
    for t in tasks:
        t.cancel()
    waiter.cancel()
    for x in await asyncio.gather(*tasks, return_exceptions=True):
        if isinstance(x, Exception):
            errors.append(f"consumer: {x!r}")
    d.missing = k - len(seen)
    return d, {"empty_pop_codes": codes, "errors": errors[:10]}


async def idle_cpu_rate(b: Broker, seconds: float = 5.0) -> float:
    """The broker's CPU seconds per second doing nothing, measured after 3 s of quiet."""
    await asyncio.sleep(3)
    i0 = cpu_seconds(b.pid)
    await asyncio.sleep(seconds)
    return (cpu_seconds(b.pid) - i0) / seconds


def drained_fields(d: Drained, idle_rate: float, done: int) -> dict[str, Any]:
    """A drain's counts and the broker's CPU over it, raw and net of its idle rate, per message."""
    net = d.broker_cpu_s - idle_rate * d.seconds
    return {
        "acked": d.acked,
        "ack_failed": d.ack_failed,
        "duplicates": d.duplicates,
        "missing": d.missing,
        "pop_requests": d.pop_requests,
        "empty_pops": d.empty_pops,
        "seconds": round(d.seconds, 2),
        "broker_cpu_s": round(d.broker_cpu_s, 2),
        "broker_idle_cpu_per_s": round(idle_rate, 4),
        "broker_cpu_us_per_msg": round(d.broker_cpu_s / done * 1e6, 2) if done else None,
        "broker_cpu_us_per_msg_net_of_idle": round(net / done * 1e6, 2) if done else None,
        "client_cpu_s": round(d.client_cpu_s, 2),
        "loadavg_start": d.loadavg_start,
        "loadavg_end": d.loadavg_end,
    }


async def pop_case(b: Broker, k: int, consumers: int, body_size: int) -> dict[str, Any]:
    topic, group = "PopBenchT", "PopBenchG"
    warm_topic, warm_group = "PopWarmT", "PopWarmG"
    c = await Client(b.addr).open(4)
    pops = [await Client(b.addr).open(1) for _ in range(consumers)]
    try:
        await create_topic(c, warm_topic)
        await create_topic(c, topic)
        # Warm-up (a JIT-compiled broker is measured warm): the same drain on another topic and group.
        warm_k = max(2000, k // 10)
        await presend(c, warm_topic, warm_k, body_size)
        warm, _ = await drain(b, pops, warm_topic, warm_group, warm_k)
        sent, stored = await presend(c, topic, k, body_size)
        print(
            f"  [{b.kind}] warm-up {warm.acked} popped+acked at {warm.acked / warm.seconds:,.0f}/s; "
            f"{stored} messages of {body_size} B pre-sent in {sent.seconds:.1f} s",
            flush=True,
        )
        idle_rate = await idle_cpu_rate(b)
        d, extra = await drain(b, pops, topic, group, k)
        done = min(d.acked, k)
        return {
            "broker": b.kind,
            "messages": k,
            "body_bytes": body_size,
            "consumers": consumers,
            "stored": stored,
            "popped": d.popped,
            **drained_fields(d, idle_rate, done),
            **extra,
            "msgs_per_s": round(done / d.seconds) if d.seconds else None,
            "presend_seconds": round(sent.seconds, 2),
            "warmup": {"messages": warm_k, "acked": warm.acked, "seconds": round(warm.seconds, 2)},
            "broker_log_errors": b.log_errors(),
        }
    finally:
        for p in pops:
            await p.close()
        await c.close()


# -- 4. pop_follow --------------------------------------------------------------------------------


async def paced_sends(
    c: Client, topic: str, rate: float, seconds: float, body: bytes, started: dict[str, float]
) -> int:
    """SEND_MESSAGE at `rate` for `seconds` over the 8 queues in turn, each started on its schedule
    whatever is in flight (at most 20,000 at once); `started` gets each send's start by UNIQ_KEY. The
    sends answered SUCCESS."""
    prefix, n = secrets.token_hex(4).upper(), int(rate * seconds)
    room = asyncio.Semaphore(20_000)
    ok = 0

    async def one(i: int) -> None:
        nonlocal ok
        key = uniq(prefix, i)
        started[key] = time.perf_counter()
        try:
            ext = send_ext(topic, i % QUEUES, f"UNIQ_KEY\x01{key}\x02TAGS\x01A")
            r = await c.call(RC.SEND_MESSAGE, ext, body)
            ok += r.code == R.SUCCESS
        finally:
            room.release()

    t0, tasks = time.perf_counter() + 0.05, []
    for i in range(n):
        delay = t0 + i / rate - time.perf_counter()
        await asyncio.sleep(delay if delay > 0 else 0)
        await room.acquire()
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    return ok


async def follow(
    b: Broker, c: Client, pops: list[Client], topic: str, group: str, rate: float, seconds: float, body: bytes
) -> tuple[int, Drained, list[float]]:
    """Sends at `rate` for `seconds` while the pop consumers (pollTime 5 s) pop and ack: the sends
    answered, what was drained, each message's end-to-end latency (send start to first pop)."""
    started: dict[str, float] = {}
    arrived: dict[str, float] = {}
    n = int(rate * seconds)
    drained = asyncio.create_task(drain(b, pops, topic, group, n, poll_ms=5000, arrived=arrived))
    ok = await paced_sends(c, topic, rate, seconds, body, started)
    d, _ = await drained
    return ok, d, [arrived[k] - t for k, t in started.items() if k in arrived]


async def pop_follow_case(
    b: Broker, rate: float, seconds: float, consumers: int, body_size: int
) -> dict[str, Any]:
    """Pop consumers that keep up: most pops find nothing and wait (long polling) for the next message."""
    topic, group = "PopFollowT", "PopFollowG"
    body = b"f" * body_size
    c = await Client(b.addr).open(4)
    pops = [await Client(b.addr).open(1) for _ in range(consumers)]
    try:
        await create_topic(c, topic)
        warm_ok, warm, warm_lat = await follow(b, c, pops, topic, group, rate, max(2.0, seconds / 4), body)
        print(
            f"  [{b.kind}] warm-up: {warm_ok:,} sent at {rate:,.0f}/s, {warm.acked:,} acked, "
            f"end to end p99 {pct_ms(warm_lat, 99)} ms",
            flush=True,
        )
        idle_rate = await idle_cpu_rate(b)
        ok, d, latencies = await follow(b, c, pops, topic, group, rate, seconds, body)
        done = min(d.acked, ok)
        e2e = {"p50": pct_ms(latencies, 50), "p99": pct_ms(latencies, 99), "max": pct_ms(latencies, 100)}
        print(
            f"  [{b.kind}] {done:,} sent and popped at {rate:,.0f}/s: end to end p50/p99/max "
            f"{e2e['p50']}/{e2e['p99']}/{e2e['max']} ms, {d.pop_requests:,} pops ({d.empty_pops:,} empty)",
            flush=True,
        )
        return {
            "broker": b.kind,
            "rate": rate,
            "window_s": seconds,
            "body_bytes": body_size,
            "consumers": consumers,
            "sent": ok,
            **drained_fields(d, idle_rate, done),
            "end_to_end_ms": e2e,
            "broker_log_errors": b.log_errors(),
        }
    finally:
        for p in pops:
            await p.close()
        await c.close()


# -- tables ---------------------------------------------------------------------------------------


def _ms(d: dict[str, Any], *keys: str) -> str:
    return "/".join("-" if d.get(k) is None else str(d[k]) for k in keys)


def lateness_table(rows: list[dict[str, Any]]) -> str:
    head = ["broker", "sent/s", "lead s", "delivered", "missing", "dup", "early", "late p50/p99/max ms"]
    head += ["vs slot end p50/p99/max ms", "all in after window", "cpu s send/deliver", "load"]
    out = []
    for r in rows:
        out.append(
            [
                r["broker"],
                f"{r['send_msgs_per_s']:,}",
                f"{r['window_opened_after_last_send_s']:.1f}",
                f"{r['delivered']:,}",
                str(r["missing"]),
                str(r["duplicates"]),
                str(r["early"]),
                _ms(r["late_ms"], "p50", "p99", "max"),
                _ms(r["late_vs_slot_end_ms"], "p50", "p99", "max"),
                f"{r['all_in_after_window_end_ms'] / 1000:.1f} s",
                f"{r['broker_cpu_s_sending']}/{r['broker_cpu_s_waiting_and_delivering']}",
                r["loadavg_end"].split()[0],
            ]
        )
    return render(head, out)


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f}"


def footprint_table(rows: list[dict[str, Any]]) -> str:
    head = ["broker", "pending", "sent/s", "enqueued", "RSS MiB", "anon", "file", "RSS idle", "growth"]
    head += ["disk MiB commitlog/cq/timerlog/wheel/index = total", "load"]
    out = []
    for r in rows:
        d = r["disk_bytes"]
        out.append(
            [
                r["broker"],
                f"{r['pending']:,}",
                f"{r['send_msgs_per_s']:,}",
                f"{'yes' if r['all_enqueued'] else 'NO'} +{r['enqueued_seconds_after_last_send']} s",
                f"{r['rss_mib']:,.0f}",
                f"{r['rss_anon_mib']:,.0f}",
                f"{r['rss_file_mib']:,.0f}",
                f"{r['idle_kib']['VmRSS'] / 1024:,.0f}",
                f"{r['rss_growth_mib']:+,.0f}",
                "/".join(_mib(d[k]) for k in ("commitlog", "consumequeue", "timerlog", "timerwheel", "index"))
                + f" = {_mib(d['total'])}",
                r["loadavg_end"].split()[0],
            ]
        )
    return render(head, out)


def pop_table(rows: list[dict[str, Any]]) -> str:
    head = ["broker", "messages", "acked", "dup", "missing", "msg/s", "cpu s", "cpu us/msg", "net us/msg"]
    head += ["client cpu s", "empty pops", "load"]
    out = []
    for r in rows:
        out.append(
            [
                r["broker"],
                f"{r['messages']:,}",
                f"{r['acked']:,}",
                str(r["duplicates"]),
                str(r["missing"]),
                f"{r['msgs_per_s']:,}",
                str(r["broker_cpu_s"]),
                str(r["broker_cpu_us_per_msg"]),
                str(r["broker_cpu_us_per_msg_net_of_idle"]),
                str(r["client_cpu_s"]),
                str(r["empty_pops"]),
                r["loadavg_end"].split()[0],
            ]
        )
    return render(head, out)


def pop_follow_table(rows: list[dict[str, Any]]) -> str:
    head = ["broker", "rate", "sent", "acked", "dup", "missing", "end to end p50/p99/max ms", "cpu s"]
    head += ["cpu us/msg", "net us/msg", "pops (empty)", "load"]
    out = []
    for r in rows:
        e2e = r["end_to_end_ms"]
        out.append(
            [
                r["broker"],
                f"{r['rate']:,.0f}/s x {r['window_s']:g} s",
                f"{r['sent']:,}",
                f"{r['acked']:,}",
                str(r["duplicates"]),
                str(r["missing"]),
                f"{e2e['p50']}/{e2e['p99']}/{e2e['max']}",
                str(r["broker_cpu_s"]),
                str(r["broker_cpu_us_per_msg"]),
                str(r["broker_cpu_us_per_msg_net_of_idle"]),
                f"{r['pop_requests']:,} ({r['empty_pops']:,})",
                r["loadavg_end"].split()[0],
            ]
        )
    return render(head, out)


def ratios(results: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    def pair(case: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        by = {r["broker"]: r for r in results.get(case, [])}
        return (by["ferromq"], by["rocketmq"]) if len(by) == 2 else None

    out: dict[str, Any] = {}
    if p := pair("lateness"):
        f, j = p
        out["lateness"] = {
            "late_p99": ratio(f["late_ms"]["p99"], j["late_ms"]["p99"]),
            "late_max": ratio(f["late_ms"]["max"], j["late_ms"]["max"]),
            "late_vs_slot_end_p99_ms_difference": (
                None
                if f["late_vs_slot_end_ms"]["p99"] is None or j["late_vs_slot_end_ms"]["p99"] is None
                else f["late_vs_slot_end_ms"]["p99"] - j["late_vs_slot_end_ms"]["p99"]
            ),
        }
    if p := pair("footprint"):
        f, j = p
        out["footprint"] = {
            "rss": ratio(f["rss_mib"], j["rss_mib"]),
            "rss_anon": ratio(f["rss_anon_mib"], j["rss_anon_mib"]),
            "disk_total": ratio(f["disk_bytes"]["total"], j["disk_bytes"]["total"]),
        }
    if p := pair("pop"):
        f, j = p
        out["pop"] = {
            "msgs_per_s": ratio(f["msgs_per_s"], j["msgs_per_s"]),
            "cpu_per_msg": ratio(f["broker_cpu_us_per_msg"], j["broker_cpu_us_per_msg"]),
            "cpu_per_msg_net_of_idle": ratio(
                f["broker_cpu_us_per_msg_net_of_idle"], j["broker_cpu_us_per_msg_net_of_idle"]
            ),
        }
    return out


def targets(results: dict[str, list[dict[str, Any]]], rat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r in results.get("lateness", []):
        out[f"{r['broker']}_no_early_delivery"] = r["early"] == 0 and r["missing"] == 0
    for r in results.get("footprint", []):
        if r["broker"] == "ferromq":
            # Below 1 M pending: the idle RSS plus the growth scaled linearly to 1 M, as an indication.
            scaled = r["idle_kib"]["VmRSS"] / 1024 + r["rss_growth_mib"] * 1_000_000 / r["pending"]
            out["ferromq_rss_le_200mb_per_1m_pending"] = {
                "rss_mib": r["rss_mib"],
                "pending": r["pending"],
                "met": r["rss_mib"] * 2**20 <= 200e6 if r["pending"] >= 1_000_000 else None,
                "note": None
                if r["pending"] >= 1_000_000
                else f"{r['pending']:,} pending only; idle RSS + growth x {1_000_000 / r['pending']:g}: "
                f"{scaled:.0f} MiB",
            }
    if "pop" in rat:
        cpu = rat["pop"]["cpu_per_msg"]
        out["pop_cpu_per_msg_le_half_java"] = {"ratio": cpu, "met": None if cpu is None else cpu <= 0.5}
    return out


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="10k timers over 20 s, 100k pending, 20k pops")
    p.add_argument(
        "--only", default="lateness,footprint,pop,pop_follow", help="cases to run (default: all four)"
    )
    p.add_argument("--brokers", default=",".join(BROKERS), help="ferromq,rocketmq (default both)")
    p.add_argument("--timers", type=int, help="timer messages of the lateness case (100,000)")
    p.add_argument("--window", type=float, help="seconds the deliver times are spread over (60)")
    p.add_argument("--pending", type=int, help="pending timers of the footprint case (1,000,000)")
    p.add_argument("--pop", type=int, help="messages drained by the pop case (200,000)")
    p.add_argument("--consumers", type=int, default=8, help="concurrent pop consumers (8)")
    p.add_argument("--body", type=int, default=1024, help="body size of the pop cases (1024)")
    p.add_argument("--rate", type=float, default=1000.0, help="msg/s sent in the pop_follow case (1,000)")
    p.add_argument("--seconds", type=float, help="measured window of the pop_follow case (20)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path, default=HERE / "results" / "timer_pop_vs_rocketmq.json")
    p.add_argument("--dir", help="parent of the scratch directory (default: the system temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the stores and logs")
    args = p.parse_args(argv)
    quick = {"timers": 10_000, "window": 20.0, "pending": 100_000, "pop": 20_000, "seconds": 5.0}
    full = {"timers": 100_000, "window": 60.0, "pending": 1_000_000, "pop": 200_000, "seconds": 20.0}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cases = [c.strip() for c in args.only.split(",") if c.strip()]
    brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    if "rocketmq" in brokers:
        if not apache_rocketmq.have_java():
            print("the Java broker needs `java` and `mvn` on PATH", file=sys.stderr)
            return 2
        apache_rocketmq.classpath(apache_rocketmq.ROCKETMQ_5_VERSION)
    scratch = Path(tempfile.mkdtemp(prefix="timer_bench-", dir=args.dir))
    results: dict[str, list[dict[str, Any]]] = {}
    started = time.monotonic()
    load_start = loadavg()
    try:
        for k, case in enumerate(cases):
            # Alternate which broker goes first, so slow drift of a shared machine hits both.
            order = brokers if k % 2 == 0 else list(reversed(brokers))
            for kind in order:
                print(f"{case}: {kind}", flush=True)
                with running(kind, scratch / f"{case}-{kind}") as b:
                    if case == "lateness":
                        r = asyncio.run(lateness_case(b, args.timers, args.window, args.seed))
                    elif case == "footprint":
                        r = asyncio.run(footprint_case(b, args.pending))
                    elif case == "pop":
                        r = asyncio.run(pop_case(b, args.pop, args.consumers, args.body))
                    elif case == "pop_follow":
                        follow_args = (args.rate, args.seconds, args.consumers, args.body)
                        r = asyncio.run(pop_follow_case(b, *follow_args))
                    else:
                        raise SystemExit(f"unknown case {case!r}")
                results.setdefault(case, []).append(r)
                if not args.keep:
                    # The next broker gets the disk (a 1 M pending store is a few hundred MB).
                    shutil.rmtree(scratch / f"{case}-{kind}" / "store", ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    for rows in results.values():
        rows.sort(key=lambda r: BROKERS.index(r["broker"]))
    rat = ratios(results)
    tgt = targets(results, rat)
    print()
    if "lateness" in results:
        r0 = results["lateness"][0]
        print(
            f"timer lateness: {r0['messages']:,} TIMER_DELIVER_MS messages over {r0['window_s']:.0f} s, "
            f"timerPrecisionMs {PRECISION_MS}; late = store time in the real topic - requested time; "
            f"vs slot end = store time - (TIMER_OUT_MS + {PRECISION_MS})"
        )
        print(lateness_table(results["lateness"]))
        print()
    if "footprint" in results:
        print("pending timers footprint (due 1-2 h ahead, 100 B bodies); RSS of the broker process")
        print(footprint_table(results["footprint"]))
        print()
    if "pop" in results:
        r0 = results["pop"][0]
        print(
            f"POP: {r0['consumers']} consumers, POP_MESSAGE maxMsgNums 32 + one ACK_MESSAGE per message, "
            f"{r0['messages']:,} messages of {r0['body_bytes']} B on 8 queues"
        )
        print(pop_table(results["pop"]))
        print()
    if "pop_follow" in results:
        r0 = results["pop_follow"][0]
        print(
            f"POP, consumers that keep up: {r0['rate']:,.0f} msg/s of {r0['body_bytes']} B for "
            f"{r0['window_s']:g} s, popped as they come by {r0['consumers']} consumers (pollTime 5 s, "
            "maxMsgNums 32, one ACK_MESSAGE per message); end to end: send start to first pop"
        )
        print(pop_follow_table(results["pop_follow"]))
        print()
    if rat:
        print("ratios ferromq / RocketMQ 5.3.3:", rat)
    for name, value in tgt.items():
        print(f"target {name}: {value}")
    params = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    doc = {
        "benchmark": "timer_pop_vs_rocketmq",
        "params": {**params, "conf": CONF, "rocketmq_version": apache_rocketmq.ROCKETMQ_5_VERSION},
        "seconds": round(time.monotonic() - started, 1),
        "loadavg_start": load_start,
        "loadavg_end": loadavg(),
        "results": results,
        "ratios_ferromq_over_rocketmq": rat,
        "targets": tgt,
    }
    write_results(args.json, doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
