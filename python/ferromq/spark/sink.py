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
that fails after the client's retries fails the task; Spark retries it. A batch's body is
encoded in Rust straight from the Arrow columns (`ferromq._store.encode_batch_messages`, the same
bytes as the client's `send_batch`): no message object or properties string per row.

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
import pyarrow.compute as pc
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

from ferromq import _store
from ferromq.client.message import Message, MessageQueue
from ferromq.client.producer import Producer, hash_queue
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


ROW = "__row"  # the row's number in its partition (for its UNIQ_KEY), added to each batch
OVERHEAD = 200  # bytes a message adds to its body in a batch (headers, properties): for the byte cap


def _first(mask: pa.Array) -> int | None:
    """The index of the first true value of a boolean array (nulls count as false), or None."""
    hits = pc.indices_nonzero(mask.fill_null(False))
    return int(hits[0].as_py()) if len(hits) else None


def _prepare(opts: WriteOptions, batch: pa.RecordBatch, first_row: int) -> pa.RecordBatch:
    """The batch with a binary `body` and its rows' numbers, after checking bodies and topics."""
    body = batch.column("body")
    bad = _first(body.is_null())
    if bad is not None:
        raise _bad(f"row {bad} of a batch has a null body")
    if body.type != pa.binary():
        batch = batch.set_column(batch.schema.get_field_index("body"), "body", body.cast(pa.binary()))
    if opts.topic is None:
        topics = batch.column("topic")
        bad = _first(pc.or_kleene(topics.is_null(), pc.equal(topics, "")))
        if bad is not None:
            raise _bad(f"row {bad} of a batch has no topic")
    rows = pa.array(range(first_row, first_row + batch.num_rows), pa.int64())
    return batch.append_column(ROW, rows)


def _encode(prefix: str, part: pa.RecordBatch) -> tuple[bytes, list[str]]:
    """A part's SEND_BATCH_MESSAGE body, encoded in Rust from its columns, and its UNIQ_KEYs."""
    names = part.schema.names
    body = part.column("body")
    _, offsets, data = body.buffers()
    uniq = [f"{prefix}{row:08X}" for row in part.column(ROW).to_pylist()]

    def strings(name: str) -> list[Any] | None:
        return part.column(name).to_pylist() if name in names else None

    encoded = _store.encode_batch_messages(
        offsets if offsets is not None else b"\0\0\0\0",
        data if data is not None else b"",
        body.offset,
        len(body),
        tags=strings("tags"),
        keys=strings("keys"),
        properties=strings("properties"),
        uniq_keys=uniq,
    )
    return encoded, uniq


def _message(topic: str, row: dict[str, Any], prefix: str, delay_level: int) -> Message:
    """A delayed row as a client message (sent on its own: RocketMQ stores no delayed batch)."""
    props = dict(row.get("properties") or {})
    props["UNIQ_KEY"] = f"{prefix}{row[ROW]:08X}"
    return Message(
        topic,
        row["body"],
        tags=row.get("tags"),
        keys=row.get("keys"),
        properties=props,
        delay_level=delay_level,
    )


Destination = tuple[str, MessageQueue | None, int]  # topic, queue (None: the producer picks), delay


@dataclass
class _Pending:
    """Rows waiting for one destination's next batch."""

    parts: list[pa.RecordBatch]
    rows: int = 0
    bytes: int = 0


class _Sender:
    """Sends one task's rows: batches per (topic, queue), a few in flight at a time, each batch
    body encoded in Rust straight from the Arrow columns."""

    def __init__(self, opts: WriteOptions, producer: Producer, prefix: str, ordered: bool) -> None:
        self.opts = opts
        self.producer = producer
        self.prefix = prefix
        self.window = 1 if ordered else IN_FLIGHT
        self.pending: dict[Destination, _Pending] = {}
        self.in_flight: set[asyncio.Task[None]] = set()
        self.sent = 0

    async def write(self, batch: pa.RecordBatch) -> None:
        for dest, rows in await self.destinations(batch):
            if dest[2] > 0:
                await self.send_delayed(dest, rows)
            else:
                await self.add(dest, rows)

    async def destinations(self, batch: pa.RecordBatch) -> list[tuple[Destination, pa.RecordBatch]]:
        """The batch's rows by destination, each keeping the rows' order: the whole batch when
        no column varies topic, queue or delay (the usual case: nothing done per row)."""
        names = batch.schema.names
        n = batch.num_rows
        if not {"topic", "queue_id", "sharding_key", "delay_level"} & set(names):
            assert self.opts.topic is not None
            return [((self.opts.topic, None, self.opts.delay_level), batch)]
        none: list[Any] = [None] * n
        col = {name: batch.column(name).to_pylist() if name in names else none for name in _VARYING}
        routes: dict[str, list[MessageQueue]] = {}
        groups: dict[Destination, list[int]] = {}
        for i in range(n):
            topic = self.opts.topic or col["topic"][i]
            shard, queue_id, delay = col["sharding_key"][i], col["queue_id"][i], col["delay_level"][i]
            mq = None
            if shard is not None or queue_id is not None:
                if topic not in routes:
                    routes[topic] = await self.producer.publish_queues(topic)
                mq = self.queue_of(topic, routes[topic], shard, queue_id)
            dest = (topic, mq, self.opts.delay_level if delay is None else delay)
            groups.setdefault(dest, []).append(i)
        if len(groups) == 1:
            return [(next(iter(groups)), batch)]
        return [(dest, batch.take(pa.array(rows, pa.int64()))) for dest, rows in groups.items()]

    @staticmethod
    def queue_of(topic: str, queues: list[MessageQueue], shard: Any, queue_id: int | None) -> MessageQueue:
        if shard is not None:
            return hash_queue(queues, shard)
        for mq in queues:
            if mq.queue_id == queue_id:
                return mq
        raise _bad(f"topic {topic} has no writable queue {queue_id}")

    async def send_delayed(self, dest: Destination, rows: pa.RecordBatch) -> None:
        topic, mq, delay = dest
        for row in rows.to_pylist():
            await self.producer.send(_message(topic, row, self.prefix, delay), queue=mq)
            self.sent += 1

    async def add(self, dest: Destination, rows: pa.RecordBatch) -> None:
        """Queues rows for `dest`, sending each batch as it fills (by count or by bytes)."""
        pending = self.pending.setdefault(dest, _Pending([]))
        while rows.num_rows:
            take = min(self.opts.batch_size - pending.rows, rows.num_rows)
            sizes = pc.add(pc.binary_length(rows.column("body").slice(0, take)), OVERHEAD)
            total = pc.cumulative_sum(sizes)
            fit = pc.sum(pc.less_equal(total, MAX_BATCH_BYTES - pending.bytes)).as_py() or 0
            if fit == 0 and pending.rows == 0:
                fit = 1  # one message above the cap: sent alone (the producer refuses it if too big)
            if fit:
                pending.parts.append(rows.slice(0, fit))
                pending.rows += fit
                pending.bytes += total[fit - 1].as_py()
                rows = rows.slice(fit)
            if fit < take or pending.rows >= self.opts.batch_size:
                await self.flush(dest)
                pending = self.pending.setdefault(dest, _Pending([]))

    async def flush(self, dest: Destination) -> None:
        pending = self.pending.pop(dest, None)
        if pending is None or not pending.rows:
            return
        while len(self.in_flight) >= self.window:
            done, self.in_flight = await asyncio.wait(self.in_flight, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                t.result()  # a failed send fails the task
        try:
            encoded = [_encode(self.prefix, part) for part in pending.parts]
        except ValueError as e:  # a separator character in a property
            raise _bad(f"a row of the batch cannot be sent: {e}") from None
        body = b"".join(e[0] for e in encoded)
        msg_id = ",".join(key for e in encoded for key in e[1])
        self.in_flight.add(asyncio.ensure_future(self._send(dest, body, msg_id, pending.rows)))

    async def _send(self, dest: Destination, body: bytes, msg_id: str, count: int) -> None:
        await self.producer.send_batch_body(dest[0], body, msg_id, queue=dest[1])
        self.sent += count

    async def finish(self) -> None:
        for dest in list(self.pending):
            await self.flush(dest)
        if self.in_flight:
            await asyncio.gather(*self.in_flight)
            self.in_flight.clear()


_VARYING = ("topic", "sharding_key", "queue_id", "delay_level")


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
                    sender = _Sender(opts, producer, prefix, "queue_id" in names or "sharding_key" in names)
                await sender.write(_prepare(opts, batch, row))
                row += batch.num_rows
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
