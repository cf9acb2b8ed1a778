"""Broker statistics as RocketMQ 4.9.7 keeps them (BrokerStatsManager / StatsItemSet and the store's
StoreStatsService): plain counters bumped on the send and pull paths, sampled by one background task.

The broker runs on one asyncio thread, so a counter update is a plain int add (no lock). Sampling
follows Java: every stats item keeps a snapshot every 10 s (the last 7: one minute), every 10 min
(the last 7: one hour) and every hour (the last 25: one day); the store-wide counters keep one a
second for the last 600 s, from which `putTps` and friends are computed over 10, 60 and 600 s."""

from __future__ import annotations

import asyncio
import bisect
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

from ferromq.broker.service import TaskService
from ferromq.store import MessageStore

logger = logging.getLogger(__name__)
stats_logger = logging.getLogger("ferromq.stats")

# Java's stats item names (org.apache.rocketmq.common.stats.Stats), as VIEW_BROKER_STATS_DATA names them.
TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"
SNDBCK_PUT_NUMS = "SNDBCK_PUT_NUMS"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"
BROKER_GET_NUMS = "BROKER_GET_NUMS"
GROUP_GET_LATENCY = "GROUP_GET_LATENCY"
ITEM_NAMES = (
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    SNDBCK_PUT_NUMS,
    BROKER_PUT_NUMS,
    BROKER_GET_NUMS,
    GROUP_GET_LATENCY,
)

# StoreStatsService's put-time distribution (ms): the bucket a put falls in is the first bound it
# is below ("<=0ms" for 0); the last bucket is 10 s and more.
PUT_DISTRIBUTE_BOUNDS = (1, 10, 50, 100, 200, 500, 1000, 2000, 3000, 4000, 5000, 10000)
PUT_DISTRIBUTE_NAMES = (
    "[<=0ms]",
    "[0~10ms]",
    "[10~50ms]",
    "[50~100ms]",
    "[100~200ms]",
    "[200~500ms]",
    "[500ms~1s]",
    "[1~2s]",
    "[2~3s]",
    "[3~4s]",
    "[4~5s]",
    "[5~10s]",
    "[10s~]",
)


def _latency_bounds() -> tuple[int, ...]:
    """The finer buckets of putLatency99 (ms upper bounds): 1 ms steps to 20, 2 to 50, 5 to 100, 10
    to 200, 50 to 500, 100 to 1000, 1000 to 10000, then everything above."""
    bounds, at = [], 0
    for step, count in ((1, 20), (2, 15), (5, 10), (10, 10), (50, 6), (100, 5), (1000, 9)):
        for _ in range(count):
            at += step
            bounds.append(at)
    return (*bounds, 2**63 - 1)


PUT_LATENCY_BOUNDS = _latency_bounds()

# rocketmq_rpc_latency's bucket bounds (ms), as RocketMQ 5.x's remoting metrics.
RPC_LATENCY_BUCKETS_MS = (1.0, 3.0, 5.0, 7.0, 10.0, 100.0, 1000.0, 2000.0, 3000.0)


@dataclass
class RpcLatency:
    """Counts per bucket of RPC_LATENCY_BUCKETS_MS (the last one: above them all) and the sum."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(RPC_LATENCY_BUCKETS_MS) + 1))
    sum_ms: float = 0.0


MINUTE_SAMPLE_S = 10
HOUR_SAMPLE_S = 600
DAY_SAMPLE_S = 3600
STORE_SAMPLE_S = 1
STORE_SAMPLES = 600  # Java's MAX_RECORDS_OF_SAMPLING: ten minutes of one-second samples
TPS_WINDOWS = (10, 60, 600)


def earliest_message_time(store: MessageStore) -> int | None:
    """The store time of the first message in the CommitLog (None when it is empty)."""
    if store.max_physical_offset <= store.min_physical_offset:
        return None
    msg = store.read(store.min_physical_offset)
    return None if msg is None else msg.store_timestamp


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def java_double(x: float) -> str:
    """`Double.toString`: the shortest round-trip digits with at least one decimal, in scientific
    notation (`1.0E7`) from 10^7 up and below 10^-3."""
    if math.isnan(x) or math.isinf(x):
        return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")
    if x == 0:
        return "0.0"
    if 1e-3 <= abs(x) < 1e7:
        text = repr(float(x))
        return text if "." in text else text + ".0"
    sign, digits, exponent = Decimal(repr(float(x))).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{exponent + len(text) - 1}"


@dataclass(frozen=True)
class Snapshot:
    """A sampled counter: when, how many calls, what total value."""

    at_ms: int
    times: int
    value: int


@dataclass(frozen=True)
class StatsData:
    """One window of a stats item (Java's StatsSnapshot): value added, calls, value per second,
    value per call."""

    sum: int
    times: int
    tps: float
    avgpt: float


def _window(snaps: deque[Snapshot]) -> StatsData:
    if not snaps:
        return StatsData(0, 0, 0.0, 0.0)
    first, last = snaps[0], snaps[-1]
    total = last.value - first.value
    span = last.at_ms - first.at_ms
    times = last.times - first.times
    tps = total * 1000.0 / span if span else 0.0
    return StatsData(total, times, tps, total / times if times > 0 else 0.0)


class StatsItem:
    """A counter (value and number of calls) with its minute/hour/day snapshots."""

    __slots__ = ("day", "hour", "key", "minute", "name", "times", "value")

    def __init__(self, name: str, key: str, at_ms: int) -> None:
        self.name = name
        self.key = key
        self.value = 0
        self.times = 0
        # Java samples a new item at once: a zero snapshot one period back, then its (zero) value now.
        now = Snapshot(at_ms, 0, 0)
        self.minute: deque[Snapshot] = deque([Snapshot(at_ms - MINUTE_SAMPLE_S * 1000, 0, 0), now], maxlen=7)
        self.hour: deque[Snapshot] = deque([Snapshot(at_ms - HOUR_SAMPLE_S * 1000, 0, 0), now], maxlen=7)
        self.day: deque[Snapshot] = deque([Snapshot(at_ms - DAY_SAMPLE_S * 1000, 0, 0), now], maxlen=25)

    def snapshot(self, at_ms: int) -> Snapshot:
        return Snapshot(at_ms, self.times, self.value)

    def in_minute(self) -> StatsData:
        return _window(self.minute)

    def in_hour(self) -> StatsData:
        return _window(self.hour)

    def in_day(self) -> StatsData:
        return _window(self.day)


class StatsItemSet:
    """The items of one stats name, by key (a topic, `topic@group`, the cluster name)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.items: dict[str, StatsItem] = {}

    def item(self, key: str) -> StatsItem:
        """The item of `key`, created (as Java creates it on first use) when missing."""
        item = self.items.get(key)
        if item is None:
            item = self.items[key] = StatsItem(self.name, key, now_ms())
        return item

    def add(self, key: str, value: int, times: int = 1) -> None:
        item = self.item(key)
        item.value += value
        item.times += times

    def get(self, key: str) -> StatsItem | None:
        return self.items.get(key)

    def remove_where(self, predicate: str) -> None:
        """Drops the items whose key is `predicate` or starts with `predicate@` (a deleted topic)."""
        for key in [k for k in self.items if k == predicate or k.startswith(predicate + "@")]:
            del self.items[key]


class StoreCounters:
    """StoreStatsService's counters: puts (times, bytes, failures, slowest), gets found / missed /
    messages transferred, and one snapshot a second of the last ten minutes for the TPS columns."""

    def __init__(self) -> None:
        self.boot_ms = now_ms()
        self.put_times = 0
        self.put_size = 0
        self.put_failed = 0
        self.get_found = 0
        self.get_miss = 0
        self.get_transferred = 0
        self.put_entire_time_max_ms = 0
        # This minute's put-time counts and the last full minute's (what the tables report).
        self.put_distribution = [0] * len(PUT_DISTRIBUTE_NAMES)
        self.last_put_distribution: list[int] | None = None
        self.put_latency = [0] * len(PUT_LATENCY_BOUNDS)
        self.last_put_latency = [0] * len(PUT_LATENCY_BOUNDS)
        self.get_entire_time_max_ms = 0
        at = self.boot_ms
        self.put_snaps: deque[tuple[int, int]] = deque([(at, 0)], maxlen=STORE_SAMPLES + 1)
        self.found_snaps: deque[tuple[int, int]] = deque([(at, 0)], maxlen=STORE_SAMPLES + 1)
        self.miss_snaps: deque[tuple[int, int]] = deque([(at, 0)], maxlen=STORE_SAMPLES + 1)
        self.transferred_snaps: deque[tuple[int, int]] = deque([(at, 0)], maxlen=STORE_SAMPLES + 1)

    def put_took(self, ms: int, puts: int = 1) -> None:
        if ms == 0:  # nearly every put: the first bucket of both
            self.put_distribution[0] += puts
            self.put_latency[0] += puts
            return
        if ms > self.put_entire_time_max_ms:
            self.put_entire_time_max_ms = ms
        self.put_distribution[bisect.bisect_right(PUT_DISTRIBUTE_BOUNDS, ms) if ms > 0 else 0] += puts
        self.put_latency[bisect.bisect_left(PUT_LATENCY_BOUNDS, ms)] += puts

    def roll_minute(self) -> None:
        self.last_put_distribution, self.put_distribution = (
            self.put_distribution,
            [0] * len(PUT_DISTRIBUTE_NAMES),
        )
        self.last_put_latency, self.put_latency = self.put_latency, [0] * len(PUT_LATENCY_BOUNDS)

    def distribution_text(self) -> str:
        """Java's putMessageDistributeTime: `null` until a minute has passed, then
        `[<=0ms]:n [0~10ms]:n ... ` over the last full minute."""
        last = self.last_put_distribution
        if last is None:
            return "null"
        return "".join(f"{name}:{n} " for name, n in zip(PUT_DISTRIBUTE_NAMES, last, strict=True))

    def latency_percentile(self, px: float) -> float:
        """StoreStatsService.findPutMessageEntireTimePX over the last full minute: the ms at
        which `px` of the puts were done, interpolated inside its bucket."""
        counts = self.last_put_latency
        target = int(sum(counts) * px)
        passed = 0
        for i, n in enumerate(counts):
            if target <= passed + n:
                rel = target - passed
                if i == 0:
                    return PUT_LATENCY_BOUNDS[0] * rel / n if n else 0.0
                low = PUT_LATENCY_BOUNDS[i - 1]
                return low + ((PUT_LATENCY_BOUNDS[i] - low) * rel / n if n else 0.0)
            passed += n
        return 0.0

    def sample(self, at_ms: int) -> None:
        self.put_snaps.append((at_ms, self.put_times))
        self.found_snaps.append((at_ms, self.get_found))
        self.miss_snaps.append((at_ms, self.get_miss))
        self.transferred_snaps.append((at_ms, self.get_transferred))


def tps_over(snaps: deque[tuple[int, int]], seconds: int) -> float | None:
    """Calls per second over the last `seconds` samples; None until that many were taken."""
    if len(snaps) <= seconds:
        return None
    begin, end = snaps[-(seconds + 1)], snaps[-1]
    span = end[0] - begin[0]
    return (end[1] - begin[1]) * 1000.0 / span if span else 0.0


def tps_columns(snaps: deque[tuple[int, int]]) -> str:
    """Java's `putTps` text: the 10 s, 60 s and 600 s rates separated by spaces, a window without
    enough samples yet left empty (`0.0  ` after half a minute)."""
    return " ".join("" if (t := tps_over(snaps, w)) is None else java_double(t) for w in TPS_WINDOWS)


class BrokerStats(TaskService):
    """Everything the admin requests and the metrics read; updated inline by the send and pull
    processors, sampled by `start()`'s task."""

    service_name = "broker-stats"

    def __init__(self, cluster_name: str, log_interval_s: int = 60) -> None:
        self.cluster_name = cluster_name
        # How often (s) `log_minute` prints the last minute's lines (statsLogIntervalSeconds).
        self.log_interval_s = log_interval_s
        self.sets = {name: StatsItemSet(name) for name in ITEM_NAMES}
        self.store = StoreCounters()
        # BrokerStats' day boundaries (msgPutTotalTodayMorning, ...): taken at local midnight.
        self.put_yesterday_morning = 0
        self.put_today_morning = 0
        self.get_yesterday_morning = 0
        self.get_today_morning = 0
        # Messages sent to a dead-letter topic, by (group, original topic).
        self.send_to_dlq: dict[tuple[str, str], int] = {}
        # Where each group's pulls of each queue reached (the next offset a pull answered): what
        # was pulled but is not committed yet is in flight.
        self.pulled: dict[tuple[str, str, int], int] = {}
        # The items a send or pull updates, by topic and by (topic, group): one lookup on the hot path.
        self._put_items: dict[str, tuple[StatsItem, StatsItem, StatsItem]] = {}
        self._get_items: dict[tuple[str, str], tuple[StatsItem, StatsItem, StatsItem]] = {}
        # Request latency (ms) by (request code, response code): bucket counts and the sum.
        self.rpc: dict[tuple[int, int], RpcLatency] = {}
        self.counted_elsewhere: Callable[[], None] | None = None
        """Brings in what is counted outside these objects (the broker's data planes)."""
        super().__init__()

    def catch_up(self) -> None:
        """Called before the counters are read (they are then current)."""
        if self.counted_elsewhere is not None:
            self.counted_elsewhere()

    # -- the hot path: plain adds -----------------------------------------------------------------

    def put(self, topic: str, count: int, size: int, started_ns: int) -> None:
        """`count` messages of `size` bytes in all stored into `topic` by a send whose store call
        began at `started_ns` (`time.perf_counter_ns()`)."""
        self._count_put(topic, count, size, 1)
        self.store.put_took((time.perf_counter_ns() - started_ns) // 1_000_000)

    def _count_put(self, topic: str, count: int, size: int, sends: int) -> None:
        items = self._put_items.get(topic)
        if items is None:
            items = self._put_items[topic] = (
                self.sets[TOPIC_PUT_NUMS].item(topic),
                self.sets[TOPIC_PUT_SIZE].item(topic),
                self.sets[BROKER_PUT_NUMS].item(self.cluster_name),
            )
        nums, sizes, broker = items
        nums.value += count
        nums.times += sends
        sizes.value += size
        sizes.times += sends
        broker.value += count
        broker.times += sends
        store = self.store
        store.put_times += count
        store.put_size += size

    def add_plane(
        self,
        puts: list[tuple[str, int, int, int]],
        took: list[tuple[int, int]],
        rpc: list[tuple[int, int, list[int], float]],
        got: list[tuple[str, str, int, int, int, int, int, int]],
    ) -> None:
        """What a data plane counted since it was last asked (`DataPlane.take_stats`): per topic
        (messages, bytes, sends), store calls per whole millisecond, request latencies, and per
        (group, topic, queue) of pulls (next offset, pulls that found and missed, messages, bytes)."""
        for topic, count, size, sends in puts:
            self._count_put(topic, count, size, sends)
        for ms, n in took:
            self.store.put_took(ms, n)
        for request_code, response_code, counts, sum_ms in rpc:
            hist = self._rpc_latency(request_code, response_code)
            hist.counts = [a + b for a, b in zip(hist.counts, counts, strict=True)]
            hist.sum_ms += sum_ms
        for group, topic, queue_id, next_offset, found, missed, count, size in got:
            self._count_got(group, topic, queue_id, next_offset, found, missed, count, size)

    def put_failed(self) -> None:
        self.store.put_failed += 1

    def sent_back(self, group: str, topic: str, to_dlq: bool) -> None:
        self.sets[SNDBCK_PUT_NUMS].add(f"{topic}@{group}", 1)
        if to_dlq:
            key = (group, topic)
            self.send_to_dlq[key] = self.send_to_dlq.get(key, 0) + 1

    def rpc_done(self, request_code: int, response_code: int, elapsed_ns: int) -> None:
        """A request answered `elapsed_ns` after it arrived."""
        hist = self._rpc_latency(request_code, response_code)
        ms = elapsed_ns / 1e6
        hist.counts[bisect.bisect_left(RPC_LATENCY_BUCKETS_MS, ms)] += 1
        hist.sum_ms += ms

    def _rpc_latency(self, request_code: int, response_code: int) -> RpcLatency:
        key = (request_code, response_code)
        hist = self.rpc.get(key)
        if hist is None:
            hist = self.rpc[key] = RpcLatency()
        return hist

    def got(self, group: str, topic: str, queue_id: int, next_offset: int, count: int, size: int) -> None:
        """A pull of `group` found `count` messages (`size` bytes) and answered `next_offset`;
        `count` 0 is a miss."""
        if count <= 0:
            self._count_got(group, topic, queue_id, next_offset, 0, 1, 0, 0)
        else:
            self._count_got(group, topic, queue_id, next_offset, 1, 0, count, size)

    def _count_got(
        self,
        group: str,
        topic: str,
        queue_id: int,
        next_offset: int,
        found: int,
        missed: int,
        count: int,
        size: int,
    ) -> None:
        """`found` pulls that got `count` messages (`size` bytes) and `missed` that got none."""
        store = self.store
        self.pulled[(group, topic, queue_id)] = next_offset
        store.get_miss += missed
        if not found:
            return
        store.get_found += found
        store.get_transferred += count
        items = self._get_items.get((topic, group))
        if items is None:
            key = f"{topic}@{group}"
            items = self._get_items[(topic, group)] = (
                self.sets[GROUP_GET_NUMS].item(key),
                self.sets[GROUP_GET_SIZE].item(key),
                self.sets[BROKER_GET_NUMS].item(self.cluster_name),
            )
        nums, sizes, broker = items
        nums.value += count
        nums.times += found
        sizes.value += size
        sizes.times += found
        broker.value += count
        broker.times += found

    # -- reading ----------------------------------------------------------------------------------

    def item(self, name: str, key: str) -> StatsItem | None:
        items = self.sets.get(name)
        return None if items is None else items.get(key)

    def group_get_tps(self, group: str, topic: str) -> float:
        item = self.item(GROUP_GET_NUMS, f"{topic}@{group}")
        return 0.0 if item is None else item.in_minute().tps

    def topic_removed(self, topic: str) -> None:
        for items in self.sets.values():
            items.remove_where(topic)
        self._put_items.pop(topic, None)
        for pair in [k for k in self._get_items if k[0] == topic]:
            del self._get_items[pair]
        for queue in [k for k in self.pulled if k[1] == topic]:
            del self.pulled[queue]

    # -- sampling ---------------------------------------------------------------------------------

    def sample_store(self, at_ms: int) -> None:
        self.store.sample(at_ms)

    def sample_items(self, period: str, at_ms: int) -> None:
        for items in self.sets.values():
            for item in items.items.values():
                getattr(item, period).append(item.snapshot(at_ms))

    def roll_day(self) -> None:
        self.put_yesterday_morning = self.put_today_morning
        self.get_yesterday_morning = self.get_today_morning
        self.put_today_morning = self.store.put_times
        self.get_today_morning = self.store.get_transferred

    def log_minute(self) -> None:
        """Java's once-a-minute stats lines (`[TOPIC_PUT_NUMS] [topic] Stats In One Minute, ...`)."""
        if not stats_logger.isEnabledFor(logging.INFO):
            return
        for name in (TOPIC_PUT_NUMS, GROUP_GET_NUMS):
            for item in list(self.sets[name].items.values()):
                d = item.in_minute()
                if d.sum:
                    stats_logger.info(
                        "[%s] [%s] Stats In One Minute, SUM: %d TPS: %.2f AVGPT: %.2f",
                        name,
                        item.key,
                        d.sum,
                        d.tps,
                        d.avgpt,
                    )

    async def _run(self) -> None:
        start = time.monotonic()
        tick = 0
        day = time.localtime().tm_yday
        while True:
            tick += 1
            # Paced on the monotonic clock from the start, so sampling does not drift.
            await asyncio.sleep(max(0.0, start + tick * STORE_SAMPLE_S - time.monotonic()))
            self.catch_up()
            at = now_ms()
            self.sample_store(at)
            if tick % MINUTE_SAMPLE_S == 0:
                self.sample_items("minute", at)
            if tick % HOUR_SAMPLE_S == 0:
                self.sample_items("hour", at)
            if tick % DAY_SAMPLE_S == 0:
                self.sample_items("day", at)
            if tick % 60 == 0:
                self.store.roll_minute()
            if tick % self.log_interval_s == 0:
                self.log_minute()
            today = time.localtime().tm_yday
            if today != day:
                day = today
                self.roll_day()
