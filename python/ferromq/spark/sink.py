"""The `ferromq` sink: `df.write.format("ferromq")` and `df.writeStream.format("ferromq")` send
rows to a live cluster through the Python client.

Options: `namesrv` (required), `topic` (else every row names its own in a `topic` column),
`producerGroup` (default `ferromq-spark-writer`), `batchSize` (messages per send, default 1024),
`delayLevel` (for every row without a `delay_level` column), `sendTimeoutMs` (default 3000).

Columns: `body` (binary or string, required); optional `topic`, `tags`, `keys`,
`properties` (map of strings), `queue_id` (int: that queue) or `sharding_key` (string: the queue
its hash picks, so one key's rows stay in order), `delay_level` (int). Any other column is refused.

Sending: each task sends its rows in batches of `batchSize` (one SEND_BATCH_MESSAGE per topic
and queue; delayed rows one by one, as RocketMQ stores no delayed batch), keeping a few batches in
flight unless rows name their queue (then one at a time per task, to keep their order). A send
that fails after the client's retries fails the task; Spark retries it.

Duplicates: every message gets a UNIQ_KEY derived from (query, micro-batch, partition, row
number), so the messages a retried task (or a micro-batch replayed after a restart) sends again
carry the same UNIQ_KEY as the first attempt's: consumers recognise them (RocketMQ consumers
see it as the message id). The row number is the row's position in its partition, so this holds
when the partition's rows come in the same order on a retry (as they do from a deterministic
plan).

Commit and abort: RocketMQ has no transaction spanning tasks, so what a task sent is visible at
once and stays. `commit` only logs what was sent; `abort` (a failed job or micro-batch) logs that
the messages of the tasks that succeeded, and of the failed attempts, remain in the topic. The
sink is therefore at least once: exactly once downstream needs de-duplication on UNIQ_KEY.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    MapType,
    StringType,
    StructType,
)

from ferromq.client.message import Message, MessageQueue
from ferromq.client.producer import Producer, hash_selector
from ferromq.errors import InvalidArgumentError

logger = logging.getLogger("ferromq.spark")

IN_FLIGHT = 4  # batches sent at once by a task whose rows do not name their queue
# Messages per SEND_BATCH_MESSAGE: large batches amortize a request's fixed cost on both sides
# (1024 x 1 KiB sends ~1.7x the messages per second of batches of 64), up to the byte cap.
BATCH_SIZE = 1024
MAX_BATCH_BYTES = 3 << 20  # below the broker's 4 MiB message limit

_KNOWN = {"namesrv", "topic", "producergroup", "batchsize", "delaylevel", "sendtimeoutms"}
# Spark passes these to a streaming sink itself.
_SPARK_OPTIONS = {"checkpointlocation", "path"}

_COLUMNS: dict[str, tuple[DataType, ...]] = {
    "topic": (StringType(),),
    "body": (BinaryType(), StringType()),
    "tags": (StringType(),),
    "keys": (StringType(),),
    "properties": (MapType(StringType(), StringType(), True), MapType(StringType(), StringType(), False)),
    "queue_id": (IntegerType(),),
    "sharding_key": (StringType(),),
    "delay_level": (IntegerType(),),
}


def _bad(msg: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"ferromq sink: {msg}")


@dataclass(frozen=True)
class WriteOptions:
    namesrv: str
    topic: str | None
    producer_group: str
    batch_size: int
    delay_level: int
    send_timeout_ms: int


def _int_option(opts: Mapping[str, str], key: str, default: int, lo: int, hi: int) -> int:
    raw = opts.get(key)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise _bad(f"option {key} must be an integer, not {raw!r}") from None
    if not lo <= value <= hi:
        raise _bad(f"option {key} must be in [{lo}, {hi}], not {value}")
    return value


def parse_write_options(options: Mapping[str, str], schema: StructType) -> WriteOptions:
    """Checks the options and the DataFrame's columns; every problem names the option or column."""
    opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
    unknown = sorted(set(opts) - _KNOWN - _SPARK_OPTIONS)
    if unknown:
        raise _bad(f"unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(_KNOWN))}")
    namesrv = opts.get("namesrv", "").strip()
    if not namesrv:
        raise _bad("option namesrv (host:port of the name server) is required")
    types = {f.name: f.dataType for f in schema.fields}
    for name, kind in types.items():
        if name not in _COLUMNS:
            raise _bad(f"unknown column {name!r}; known: {', '.join(_COLUMNS)}")
        if kind not in _COLUMNS[name]:
            allowed = " or ".join(t.simpleString() for t in _COLUMNS[name])
            raise _bad(f"column {name} must be {allowed}, not {kind.simpleString()}")
    if "body" not in types:
        raise _bad("a body column is required")
    topic = opts.get("topic", "").strip() or None
    if (topic is None) == ("topic" not in types):
        raise _bad("give exactly one of the option topic or a topic column")
    if "queue_id" in types and "sharding_key" in types:
        raise _bad("give at most one of the columns queue_id and sharding_key")
    return WriteOptions(
        namesrv=namesrv,
        topic=topic,
        producer_group=opts.get("producergroup", "ferromq-spark-writer"),
        batch_size=_int_option(opts, "batchsize", BATCH_SIZE, 1, 10_000),
        delay_level=_int_option(opts, "delaylevel", 0, 0, 18),
        send_timeout_ms=_int_option(opts, "sendtimeoutms", 3000, 1, 600_000),
    )


@dataclass
class SinkCommit(WriterCommitMessage):
    partition: int
    sent: int


def uniq_key_prefix(query: str, batch: int, partition: int) -> str:
    """The first 24 of a task's UNIQ_KEYs' 32 hex digits: a digest of what names the task."""
    return hashlib.blake2b(f"{query}/{batch}/{partition}".encode(), digest_size=12).hexdigest().upper()


def uniq_key(query: str, batch: int, partition: int, row: int) -> str:
    """32 upper-case hex digits, as client UNIQ_KEYs look; the same for the same row of a retry
    (the task's prefix, then the row number: one digest per task, not per row)."""
    return f"{uniq_key_prefix(query, batch, partition)}{row:08X}"


def _messages(opts: WriteOptions, batch: pa.RecordBatch) -> Iterator[tuple[Message, Any, int | None]]:
    """(message, sharding key, queue id) per row."""
    cols = {name: batch.column(name).to_pylist() for name in batch.schema.names}
    n = batch.num_rows
    none: list[Any] = [None] * n
    topics, bodies = cols.get("topic", none), cols["body"]
    tags, keys, props = cols.get("tags", none), cols.get("keys", none), cols.get("properties", none)
    delays, shards, queues = (
        cols.get("delay_level", none),
        cols.get("sharding_key", none),
        cols.get("queue_id", none),
    )
    for i in range(n):
        topic = opts.topic or topics[i]
        if not topic:
            raise _bad(f"row {i} of a batch has no topic")
        body = bodies[i]
        if body is None:
            raise _bad(f"row {i} of a batch has a null body")
        msg = Message(
            topic,
            body.encode() if isinstance(body, str) else body,
            tags=tags[i],
            keys=keys[i],
            properties=dict(props[i] or {}),
            delay_level=opts.delay_level if delays[i] is None else delays[i],
        )
        yield msg, shards[i], queues[i]


class _Sender:
    """Sends one task's rows: batches per (topic, queue), a few in flight at a time."""

    def __init__(self, opts: WriteOptions, producer: Producer, ordered: bool) -> None:
        self.opts = opts
        self.producer = producer
        self.window = 1 if ordered else IN_FLIGHT
        self.pending: dict[tuple[str, MessageQueue | None], list[Message]] = {}
        self.pending_bytes: dict[tuple[str, MessageQueue | None], int] = {}
        self.in_flight: set[asyncio.Task[None]] = set()
        self.sent = 0

    async def queue_of(self, msg: Message, shard: Any, queue_id: int | None) -> MessageQueue | None:
        if shard is None and queue_id is None:
            return None
        queues = await self.producer.publish_queues(msg.topic)
        if shard is not None:
            return hash_selector(queues, msg, shard)
        for mq in queues:
            if mq.queue_id == queue_id:
                return mq
        raise _bad(f"topic {msg.topic} has no writable queue {queue_id}")

    async def add(self, msg: Message, shard: Any, queue_id: int | None) -> None:
        mq = None if shard is None and queue_id is None else await self.queue_of(msg, shard, queue_id)
        if msg.delay_level > 0:
            await self.producer.send(msg, queue=mq)
            self.sent += 1
            return
        key = (msg.topic, mq)
        batch = self.pending.setdefault(key, [])
        batch.append(msg)
        self.pending_bytes[key] = self.pending_bytes.get(key, 0) + len(msg.body) + 200
        if len(batch) >= self.opts.batch_size or self.pending_bytes[key] >= MAX_BATCH_BYTES:
            await self.flush(key)

    async def flush(self, key: tuple[str, MessageQueue | None]) -> None:
        msgs = self.pending.pop(key, [])
        self.pending_bytes.pop(key, None)
        if not msgs:
            return
        while len(self.in_flight) >= self.window:
            done, self.in_flight = await asyncio.wait(self.in_flight, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                t.result()  # a failed send fails the task
        self.in_flight.add(asyncio.ensure_future(self._send(msgs, key[1])))

    async def _send(self, msgs: list[Message], mq: MessageQueue | None) -> None:
        if len(msgs) == 1:
            await self.producer.send(msgs[0], queue=mq)
        else:
            await self.producer.send_batch(msgs, queue=mq)
        self.sent += len(msgs)

    async def finish(self) -> None:
        for key in list(self.pending):
            await self.flush(key)
        if self.in_flight:
            await asyncio.gather(*self.in_flight)
            self.in_flight.clear()


def _write(opts: WriteOptions, query: str, batches: Iterator[pa.RecordBatch]) -> SinkCommit:
    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx is not None else 0
    micro_batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
    batch_id = int(micro_batch) if micro_batch is not None else 0

    prefix = uniq_key_prefix(query, batch_id, partition)

    async def run() -> int:
        producer = Producer(
            opts.producer_group,
            opts.namesrv,
            instance_name=f"spark-{query[:8]}-{batch_id}-{partition}-{uuid.uuid4().hex[:8]}",
            send_timeout=opts.send_timeout_ms / 1000,
        )
        await producer.start()
        try:
            sender: _Sender | None = None
            row = 0
            for batch in batches:
                if sender is None:
                    names = batch.schema.names
                    sender = _Sender(opts, producer, "queue_id" in names or "sharding_key" in names)
                for msg, shard, queue_id in _messages(opts, batch):
                    msg.properties["UNIQ_KEY"] = f"{prefix}{row:08X}"
                    row += 1
                    await sender.add(msg, shard, queue_id)
            if sender is None:
                return 0
            await sender.finish()
            return sender.sent
        finally:
            await producer.stop()

    loop = asyncio.new_event_loop()
    try:
        sent = loop.run_until_complete(run())
    finally:
        loop.close()
    return SinkCommit(partition, sent)


def _total(messages: Sequence[WriterCommitMessage | None]) -> int:
    return sum(m.sent for m in messages if isinstance(m, SinkCommit))


class FerroMQWriter(DataSourceArrowWriter):
    """A batch write: the query id is fixed on the driver, so a retried task repeats its keys."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.query = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return _write(self.opts, self.query, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        logger.info("ferromq sink: write %s sent %d messages", self.query, _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        logger.warning(
            "ferromq sink: write %s failed; the %d messages its finished tasks sent stay in the topic",
            self.query,
            _total(messages),
        )


class FerroMQStreamWriter(DataSourceStreamArrowWriter):
    """A streaming write; keys come from the query id (kept in the checkpoint) and the batch id,
    so a micro-batch replayed after a restart repeats its keys too."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        ctx = TaskContext.get()
        query = (ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None) or "stream"
        return _write(self.opts, query, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        logger.info("ferromq sink: micro-batch %d sent %d messages", batchId, _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        logger.warning(
            "ferromq sink: micro-batch %d failed; the %d messages its finished tasks sent stay in the topic",
            batchId,
            _total(messages),
        )
