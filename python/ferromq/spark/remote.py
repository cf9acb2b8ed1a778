"""Remote mode: for executors that cannot see the store files, read through the brokers.

The driver asks the name server for routes and the brokers for queue offsets; each task pulls its
offset range from the queue's master with plain PULL_MESSAGE requests (no offsets committed, no
long polling) and hands the pulled record bytes to the same Rust decoder local mode uses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence

import pyarrow as pa

from ferromq import _store
from ferromq.client.admin import Admin
from ferromq.client.message import MessageQueue
from ferromq.errors import BrokerError, TopicNotExistError
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.headers import PullMessageRequestHeader, PullMessageResponseHeader
from ferromq.remoting.connection import open_connection
from ferromq.spark.dataloss import report_loss
from ferromq.spark.options import ReadOptions
from ferromq.spark.planning import QueueBounds, QueueRange
from ferromq.spark.schema import record_batch

PULL_BATCH = 32  # what a Java broker returns per pull by default (maxTransferCountOnMessageInMemory)
PULL_TIMEOUT = 30.0
DECODE_BYTES = 2 << 20  # pulled bytes gathered before one decode into a RecordBatch
# Replies that carry no messages but may move the offset on.
SKIPPING_CODES = frozenset(
    {ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_OFFSET_MOVED}
)


class RemoteSource:
    """Queue bounds and timestamps from the brokers of a cluster (used on the driver)."""

    def __init__(self, namesrv: str, opts: ReadOptions) -> None:
        self._namesrv = namesrv
        self._opts = opts

    def close(self) -> None:
        pass

    def queues(self) -> list[QueueBounds]:
        return asyncio.run(self._queues())

    async def _queues(self) -> list[QueueBounds]:
        async with Admin(self._namesrv) as admin:
            topics = list(self._opts.topics) or [t for t in await admin.list_topics() if self._opts.wants(t)]
            out: list[QueueBounds] = []
            for topic in topics:
                try:
                    route = await admin.topic_route(topic)
                except TopicNotExistError:
                    continue
                for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
                    addr = route.master(qd.broker_name)
                    if addr is None:
                        continue
                    for qid in range(qd.read_queue_nums):
                        mq = MessageQueue(topic, qd.broker_name, qid)
                        lo, hi = await admin.min_offset(mq), await admin.max_offset(mq)
                        out.append(QueueBounds(topic, qid, lo, hi, qd.broker_name, addr))
            return out

    def offset_by_time(self, queue: QueueBounds, timestamp_ms: int, *, end: bool) -> int:
        async def search() -> int:
            async with Admin(self._namesrv) as admin:
                assert queue.broker_name is not None
                mq = MessageQueue(queue.topic, queue.broker_name, queue.queue_id)
                return await admin.search_offset(mq, timestamp_ms)

        found = asyncio.run(search())
        # A Java broker answers the *nearest* offset, which may be the last one before the time:
        # an exclusive end must then include it (rows are filtered by store time anyway).
        return min(found + 1, queue.max_offset) if end else found

    def expected_rows(self, r: QueueRange, tags: list[str] | None) -> int:
        """Every offset of the range: the driver cannot see the consume queue's tag codes."""
        return r.end - r.start


def _pull_request(opts: ReadOptions, part: QueueRange, offset: int) -> RemotingCommand:
    # Every tag: they are matched exactly by the decoder (a broker-side filter could return
    # offsets past the end of the range).
    ext = PullMessageRequestHeader.read_only(
        opts.consumer_group, part.topic, part.queue_id, offset, min(PULL_BATCH, part.end - offset)
    ).to_ext()
    return RemotingCommand(code=RequestCode.PULL_MESSAGE, ext=ext)


def read_remote(
    opts: ReadOptions,
    parts: Sequence[QueueRange],
    schema: pa.Schema,
    rows: _store.RowFilter,
    tags: list[str] | None,
) -> Iterator[pa.RecordBatch]:
    """The rows of some queue ranges that pass `rows`, pulled from their brokers and decoded in
    Rust; `rows` checks the tags too (see `_pull_request`)."""
    for part in parts:
        yield from _read_range(opts, part, schema, rows)


def _read_range(
    opts: ReadOptions, part: QueueRange, schema: pa.Schema, rows: _store.RowFilter
) -> Iterator[pa.RecordBatch]:
    if part.broker_addr is None:
        raise BrokerError(
            f"ferromq data source: no broker master serves {part.topic}/{part.queue_id} any more",
            ResponseCode.SERVICE_NOT_AVAILABLE,
        )
    host, _, port = part.broker_addr.rpartition(":")
    loop = asyncio.new_event_loop()
    conn = loop.run_until_complete(open_connection(host, int(port)))
    pending = bytearray()

    def decode() -> pa.RecordBatch:
        cols = _store.decode_columns(bytes(pending), rows)
        pending.clear()
        return record_batch(cols, schema)

    try:
        offset = part.start
        while offset < part.end:
            reply = loop.run_until_complete(conn.request(_pull_request(opts, part, offset), PULL_TIMEOUT))
            reached = PullMessageResponseHeader.next_begin_offset_of(reply.ext, offset)
            if reply.code == ResponseCode.SUCCESS:
                pending += reply.body or b""
            elif reply.code not in SKIPPING_CODES:
                raise BrokerError(
                    f"ferromq data source: pulling {part.topic}/{part.queue_id} at {offset} from "
                    f"{part.broker_addr} failed: {reply.code} {reply.remark or ''}",
                    ResponseCode(reply.code) if reply.code in ResponseCode._value2member_map_ else None,
                )
            elif reached > offset:
                # With subscription "*" a broker only moves on without messages past removed ones
                # (OFFSET_TOO_SMALL, MESSAGE_WAS_REMOVING, OFFSET_FOUND_NULL in the remark).
                why = f"{part.broker_addr} answered {ResponseCode(reply.code).name} {reply.remark or ''}"
                report_loss(
                    opts.fail_on_data_loss, part.topic, part.queue_id, offset, min(reached, part.end), why
                )
            if reached <= offset:
                report_loss(
                    opts.fail_on_data_loss,
                    part.topic,
                    part.queue_id,
                    offset,
                    part.end,
                    f"{part.broker_addr} stopped before the planned end: {reply.code} {reply.remark or ''}",
                )
                break
            offset = reached
            if len(pending) >= DECODE_BYTES:
                yield decode()
        if pending:
            yield decode()
    finally:
        loop.run_until_complete(conn.close())
        loop.close()
