"""Type stub of the Rust extension `ferromq._store` (crates/python)."""

from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from typing import Any, Protocol, final

__all__ = [
    "MAX_HELD_PULLS",
    "MAX_LITE_TOPIC_BYTES",
    "MAX_WAITING_POPS",
    "SEND_V2_LETTERS",
    "STORE_DEFAULTS",
    "STORE_ERROR_CLASSES",
    "SYSTEM_TOPICS",
    "SYSTEM_TOPIC_PREFIX",
    "WIRE_CONSTANTS",
    "ConsumerOffsets",
    "DataPlane",
    "GetResult",
    "GrpcFront",
    "HaMaster",
    "HaSlave",
    "Popped",
    "Popper",
    "PropertyEdits",
    "PutBatchResult",
    "PutResult",
    "RowFilter",
    "SendOutcome",
    "Sender",
    "Store",
    "TopicRoute",
    "__version__",
    "build_profile",
    "decode_columns",
    "decode_offset_msg_id",
    "decode_properties",
    "decode_records",
    "encode_batch_messages",
    "encode_properties",
    "fifo_queue",
    "frame_length",
    "get_property",
    "grpc_check_group",
    "grpc_check_invisible",
    "grpc_check_lite_topic",
    "grpc_check_topic",
    "grpc_message",
    "grpc_outgoing",
    "grpc_polling_time",
    "grpc_popped",
    "grpc_send_failure",
    "index_segment",
    "java_hash",
    "json_reply",
    "offset_msg_id",
    "parse_tag_expression",
    "pop_ack",
    "pop_checkpoint",
    "pop_real_topic",
    "pop_receipt",
    "pop_retry_mark",
    "pop_retry_topic",
    "read_frame",
    "records_examined",
    "tags_code",
    "truncate_commitlog",
]

__version__: str
build_profile: str
STORE_ERROR_CLASSES: list[tuple[str, int]]
"""The `ferromq.errors` classes the store's errors are raised as, with the response code each is
raised with (the one the data plane answers)."""
SYSTEM_TOPICS: list[str]
"""The topics every broker keeps to itself (TopicValidator's; crates/broker/src/topics.rs)."""
SYSTEM_TOPIC_PREFIX: str
"""Every topic whose name starts so is a system topic too."""
# Pulls held, and pops waiting, on the data plane at most; past them they are Python's.
MAX_HELD_PULLS: int
MAX_WAITING_POPS: int
MAX_LITE_TOPIC_BYTES: int
"""The longest lite topic (RocketMQ 5.5's proxy maxLiteTopicSize), in bytes."""
WIRE_CONSTANTS: list[tuple[str, str]]
"""The codes, flags and system topics the Rust side defines, by their Python names (as text)."""
SEND_V2_LETTERS: list[tuple[str, str]]
"""(V1 name, SEND_MESSAGE_V2 letter) of each send header field the data plane reads."""
STORE_DEFAULTS: dict[str, object]
"""The Rust store's default of every `Store` argument but `root`, by the argument's name
(crates/store/src/config.rs `StoreConfig::new`)."""

@final
class RowFilter:
    def __new__(
        cls,
        *,
        tags: list[str] | None = None,
        keys: list[str] | None = None,
        min_store_timestamp: int | None = None,
        max_store_timestamp: int | None = None,
        min_born_timestamp: int | None = None,
        max_born_timestamp: int | None = None,
        min_commitlog_offset: int | None = None,
        max_commitlog_offset: int | None = None,
        include_properties: bool = True,
        body_views: bool = False,
    ) -> RowFilter: ...
    @property
    def include_properties(self) -> bool: ...
    @property
    def body_views(self) -> bool: ...

def records_examined() -> int: ...
def encode_batch_messages(
    body_offsets: Any,
    body_data: Any,
    first: int,
    count: int,
    *,
    tags: Sequence[str | None] | None = None,
    keys: Sequence[str | None] | None = None,
    properties: Sequence[Sequence[tuple[str, str | None]] | None] | None = None,
    uniq_keys: Sequence[str] | None = None,
) -> bytes:
    """A SEND_BATCH_MESSAGE body of `count` messages, bodies from an Arrow binary array's
    buffers (int32 offsets read from entry `first`, data): the bytes `Producer.send_batch`
    sends for the same messages. Raises ValueError (naming the message) on a separator
    character in a property."""

@final
class PutResult:
    @property
    def topic(self) -> str: ...
    @property
    def queue_id(self) -> int: ...
    @property
    def queue_offset(self) -> int: ...
    @property
    def physical_offset(self) -> int: ...
    @property
    def wrote_bytes(self) -> int: ...
    @property
    def store_timestamp(self) -> int: ...
    @property
    def msg_id(self) -> str: ...
    @property
    def end_offset(self) -> int: ...
    @property
    def flush_ok(self) -> bool: ...
    @property
    def wait(self) -> bool:
        """False when the stored WAIT property is "false": the producer does not wait for the disk."""
    @property
    def tags_code(self) -> int:
        """Tags code of the stored TAGS."""
    @property
    def lmq_arrivals(self) -> list[tuple[str, int]]:
        """The light message queues the record was dispatched to, each with its next offset."""

@final
class PropertyEdits:
    """What the send pipeline does to a message's properties: `edits` `(op, name, value)` with op
    `set`, `default` (set if absent) or `remove` (value ignored), applied in order; `drop_wait`
    drops WAIT unless the message is delayed; `schedule` sends a delayed message to the schedule
    topic. A name or value that is empty or holds a separator raises `InvalidArgumentError`."""

    def __new__(
        cls,
        edits: Sequence[tuple[str, str, str]] = ...,
        *,
        drop_wait: bool = False,
        schedule: bool = True,
    ) -> PropertyEdits: ...

@final
class PutBatchResult:
    @property
    def topic(self) -> str: ...
    @property
    def queue_id(self) -> int: ...
    @property
    def first_queue_offset(self) -> int: ...
    @property
    def count(self) -> int: ...
    @property
    def physical_offsets(self) -> list[int]: ...
    @property
    def msg_ids(self) -> list[str]: ...
    @property
    def wrote_bytes(self) -> int: ...
    @property
    def store_timestamp(self) -> int: ...
    @property
    def end_offset(self) -> int: ...
    @property
    def flush_ok(self) -> bool: ...
    @property
    def wait(self) -> bool:
        """False when the batch's WAIT property is "false"."""
    def __len__(self) -> int: ...

@final
class GetResult:
    @property
    def status(self) -> str: ...
    @property
    def next_begin_offset(self) -> int: ...
    @property
    def min_offset(self) -> int: ...
    @property
    def max_offset(self) -> int: ...
    @property
    def message_count(self) -> int: ...
    @property
    def queue_offsets(self) -> list[int]: ...
    @property
    def body(self) -> bytes: ...
    @property
    def suggest_pulling_from_slave(self) -> bool:
        """The last record read is read from disk (a pull's accessMessageInMemoryMaxRatio)."""
    def pull_code(self, request_offset: int) -> int:
        """The response code of a pull at `request_offset` that read this (the data plane's)."""

@final
class Store:
    def __new__(
        cls,
        root: str | PathLike[str],
        *,
        read_only: bool = False,
        commitlog_dir: str | PathLike[str] | None = None,
        mapped_file_size_commitlog: int = 1073741824,
        mapped_file_size_consume_queue: int = 6000000,
        flush_disk_type: str = "ASYNC_FLUSH",
        flush_interval_commitlog_ms: int = 500,
        flush_commitlog_least_pages: int = 4,
        flush_commitlog_thorough_interval_ms: int = 10000,
        flush_interval_consume_queue_ms: int = 1000,
        flush_consume_queue_least_pages: int = 2,
        flush_consume_queue_thorough_interval_ms: int = 60000,
        sync_flush_timeout_ms: int = 5000,
        max_message_size: int = 4194304,
        message_index_enable: bool = True,
        max_hash_slot_num: int = 5000000,
        max_index_num: int = 20000000,
        message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
        store_host: str = "127.0.0.1:10911",
        check_crc_on_recover: bool = True,
        enable_lmq: bool = False,
        enable_multi_dispatch: bool = False,
        warm_mapped_file_enable: bool = True,
        file_reserved_time_hours: int = 72,
        delete_when: str = "04",
        disk_max_used_space_ratio: int = 75,
        disk_space_clean_forcibly_ratio: int = 85,
        disk_space_warning_level_ratio: int = 90,
        clean_file_forcibly_enable: bool = True,
        delete_commitlog_files_interval_ms: int = 100,
        delete_consume_queue_files_interval_ms: int = 100,
        destroy_mapped_file_interval_forcibly_ms: int = 120000,
        clean_resource_interval_ms: int = 10000,
        max_transfer_count_on_message_in_memory: int = 32,
        max_transfer_bytes_on_message_in_memory: int = 262144,
        max_transfer_count_on_message_in_disk: int = 8,
        max_transfer_bytes_on_message_in_disk: int = 65536,
        access_message_in_memory_max_ratio: int = 40,
        timer_wheel_enable: bool = True,
        timer_precision_ms: int = 1000,
        timer_max_delay_sec: int = 259200,
        timer_roll_window_slot: int = 172800,
        timer_congest_num_each_slot: int = 2147483647,
        mapped_file_size_timer_log: int = 104857600,
        mapped_file_hot_window: int | None = ...,  # 8 MiB; None keeps every page mapped
    ) -> Store: ...
    def put(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: str = "",
        *,
        flag: int = 0,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: str = "127.0.0.1:0",
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
        wait: bool = True,
    ) -> PutResult: ...
    def send(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: str,
        edits: PropertyEdits,
        *,
        flag: int = 0,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: str = "127.0.0.1:0",
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
    ) -> PutResult: ...
    def send_batch(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: str,
        edits: PropertyEdits,
        *,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: str = "127.0.0.1:0",
    ) -> PutBatchResult: ...
    def put_batch(
        self,
        topic: str,
        queue_id: int,
        bodies: list[bytes],
        properties: Sequence[str] | str | None = None,
        flags: list[int] | None = None,
        *,
        sys_flag: int = 0,
        born_timestamp: int = 0,
        born_host: str = "127.0.0.1:0",
        wait: bool = True,
    ) -> PutBatchResult: ...
    def wait_flushed(self, offset: int, timeout_ms: int | None = None) -> bool: ...
    def on_flushed(
        self, offset: int, callback: Callable[[bool], object], timeout_ms: int | None = None
    ) -> None: ...
    def get(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int = 32,
        max_bytes: int = 262144,
        tag_codes: list[int] | None = None,
    ) -> GetResult: ...
    def pull(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tag_codes: list[int] | None = None,
    ) -> GetResult: ...
    def read_columns(
        self,
        topic: str,
        queue_id: int,
        from_offset: int,
        to_offset: int,
        filter: RowFilter,
        *,
        max_rows: int = 65536,
        max_bytes: int = 67108864,
        tag_codes: list[int] | None = None,
    ) -> dict[str, Any]: ...
    def count_units(
        self,
        topic: str,
        queue_id: int,
        from_offset: int,
        to_offset: int,
        tag_codes: list[int] | None = None,
    ) -> int: ...
    def deliver_due_delayed(
        self, level: int, from_offset: int, now_ms: int, max_count: int
    ) -> tuple[int, int | None, list[tuple[str, int, int, int]], int]: ...
    def timer_enqueue(
        self, max_count: int, deliver_due: bool = True
    ) -> tuple[int, list[tuple[str, int, int, int]]]: ...
    def timer_follow(self, read_time_ms: int, queue_offset: int) -> None: ...
    def timer_progress(self) -> tuple[int, int, int]: ...
    def timer_dequeue(
        self, now_ms: int, max_count: int
    ) -> tuple[list[tuple[str, int, int, int]], int, bool]: ...
    def timer_checkpoint(self) -> None: ...
    def timer_clean(self) -> int: ...
    def timer_stats(self) -> dict[str, int]: ...
    def read(self, physical_offset: int) -> bytes | None: ...
    def read_range(self, physical_offset: int, max_bytes: int = 1048576) -> tuple[bytes, int]: ...
    def look_message_by_id(self, msg_id: str) -> bytes | None: ...
    def query(
        self, topic: str, key: str, max_num: int = 32, begin: int = 0, end: int = ...
    ) -> list[bytes]: ...
    def min_offset(self, topic: str, queue_id: int) -> int: ...
    def confirm_reads_by(self, ha: HaMaster | None = None) -> None:
        """Readers see only what `ha`'s slaves acknowledged (None: no such bound): a
        controller-mode master whose SyncStateSet holds replicas."""
    def max_offset(self, topic: str, queue_id: int) -> int: ...
    def offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int: ...
    def store_time(self, topic: str, queue_id: int, offset: int) -> int | None: ...
    def earliest_store_time(self, topic: str, queue_id: int) -> int | None: ...
    def queues(self) -> list[tuple[str, int, int, int]]: ...
    @property
    def min_physical_offset(self) -> int: ...
    @property
    def max_physical_offset(self) -> int: ...
    @property
    def flushed_physical_offset(self) -> int: ...
    @property
    def read_only(self) -> bool: ...
    @property
    def flush_disk_type(self) -> str: ...
    @property
    def recovery(self) -> tuple[bool, int, int, int]: ...
    def clean_expired_files(
        self,
        *,
        now_ms: int | None = None,
        hour: int | None = None,
        physic_used_ratio: float | None = None,
        logics_used_ratio: float | None = None,
    ) -> tuple[bool, bool, bool, bool, int, int, int, int]: ...
    def execute_delete_files_manually(self) -> None: ...
    def clean_expired_consume_queues(self) -> int: ...
    @property
    def retention_floor(self) -> int | None: ...
    @retention_floor.setter
    def retention_floor(self, floor: int | None) -> None: ...
    @property
    def retention_stats(self) -> tuple[int, int, int, int, int]: ...
    def space_status(self) -> tuple[bool, float, int | None]: ...
    def refresh(self) -> None: ...
    def delete_topic(self, topic: str) -> None: ...
    def delete_lmqs(self, names: list[str], idle_until_ms: int | None = None) -> list[str]:
        """Deletes the light message queues named (only those idle until `idle_until_ms` when given,
        judged under the put lock); the names deleted."""
    def idle_lmqs(self, prefix: str, cutoff_ms: int) -> list[str]:
        """The light message queues named `prefix...` with messages, none stored after `cutoff_ms`."""
    def lmq_count(self) -> int:
        """How many light message queues (`%LMQ%...`) the store holds."""
    def lmq_infos(self, prefix: str) -> list[tuple[str, int, int, int]]:
        """(name, min offset, max offset, CommitLog offset of the newest record or -1) of each light
        message queue whose name starts with `prefix`, sorted by name."""
    def flush(self) -> None: ...
    def close(self) -> None: ...

@final
class HaMaster:
    """A master's HA service: streams the CommitLog to slaves on `port`."""

    def __new__(
        cls,
        store: Store,
        bind: str,
        *,
        heartbeat_interval_ms: int = 5000,
        housekeeping_interval_ms: int = 20000,
        transfer_batch_size: int = 32768,
        slave_fallbehind_max: int = 268435456,
    ) -> HaMaster: ...
    @property
    def port(self) -> int: ...
    @property
    def connections(self) -> int: ...
    @property
    def acked_offset(self) -> int: ...
    def is_slave_ok(self, end_offset: int) -> bool: ...
    def notify_appended(self) -> None: ...
    def on_replicated(self, offset: int, callback: Callable[[bool], object], timeout_ms: int) -> None: ...
    def slaves(self) -> list[tuple[str, int, float | None]]: ...
    def set_ack_peers(self, peers: list[str] | None) -> None: ...
    def close(self) -> None: ...

class _PlaneTls(Protocol):
    """What `DataPlane` reads TLS settings from (ferromq.remoting.tls.PlaneTls)."""

    @property
    def mode(self) -> str: ...
    @property
    def cert_pem(self) -> bytes: ...
    @property
    def key_pem(self) -> bytes: ...
    @property
    def client_auth(self) -> str: ...
    @property
    def trust_pem(self) -> bytes | None: ...

@final
class TopicRoute:
    """What a send's topic allows: its queues, whether its tags are multi-tags, and its
    `message.type` (what a 5.x client may send to it; an unknown name reads as UNSPECIFIED)."""

    def __new__(
        cls, write_queues: int, read_queues: int, multi_tag: bool = False, message_type: str = "NORMAL"
    ) -> TopicRoute: ...
    @property
    def write_queues(self) -> int: ...
    @property
    def read_queues(self) -> int: ...
    @property
    def multi_tag(self) -> bool: ...
    @property
    def message_type(self) -> str: ...

@final
class SendOutcome:
    """Where a send was stored and what its reply says."""

    @property
    def topic(self) -> str: ...
    @property
    def queue_id(self) -> int: ...
    @property
    def next_offset(self) -> int: ...
    @property
    def tags_code(self) -> int | None: ...
    @property
    def messages(self) -> int: ...
    @property
    def wrote_bytes(self) -> int: ...
    @property
    def lmq_arrivals(self) -> list[tuple[str, int]]:
        """The light message queues the message was dispatched to, each with its next offset."""
    @property
    def reply_fields(self) -> dict[str, str]: ...

@final
class ConsumerOffsets:
    """The broker's consumer offsets (`topic@group` -> queue -> offset), shared with the data
    planes."""

    def __new__(cls) -> ConsumerOffsets: ...
    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None: ...
    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1."""
    def put_all(self, key: str, queues: dict[int, int]) -> None: ...
    def remove_topic(self, topic: str) -> None: ...
    def remove_topics(self, topics: set[str]) -> None:
        """Every `topic@group` of the topics named goes, in one pass."""
    def remove_group(self, group: str) -> None:
        """Every `topic@group` of `group` goes."""
    def snapshot(self) -> dict[str, dict[int, int]]: ...
    def to_json(self) -> bytes:
        """The table as `consumerOffset.json` holds it (keys and queue ids sorted, indented by two)."""
    def take_dirty(self) -> bool:
        """Whether the table changed since the last call (and marks it clean)."""
    @staticmethod
    def key(topic: str, group: str) -> str: ...

@final
class Popped:
    """What a pop answers."""

    @property
    def pop_time(self) -> int: ...
    @property
    def invisible_time(self) -> int: ...
    @property
    def revive_qid(self) -> int: ...
    @property
    def body(self) -> bytes: ...
    @property
    def count(self) -> int: ...
    @property
    def rest(self) -> int: ...
    @property
    def takes(self) -> list[tuple[str, int, int, list[int]]]:
        """(topic, queue id, start offset, queue offsets) of each queue taken from."""
    @property
    def start_offset_info(self) -> str: ...
    @property
    def msg_offset_info(self) -> str: ...
    @property
    def stored(self) -> list[tuple[str, int, int, int]]:
        """(topic, queue id, next offset, tags code) of each checkpoint stored."""

class _PopColdReader(Protocol):
    """Tiered storage under the pops (ferromq.tiered.service.TieredService)."""

    def min_offset(self, topic: str, queue_id: int) -> int | None: ...
    def pop_read(
        self, topic: str, queue_id: int, offset: int, max_count: int, tag_codes: list[int] | None
    ) -> tuple[bool, bytes, list[int], int, int] | None: ...

@final
class Popper:
    """The rules of POP consumption (`ferromq_broker::popper`), shared with the data planes.
    Refusals raise `BrokerError` with Java's code and remark."""

    def __new__(
        cls,
        store: Store,
        offsets: ConsumerOffsets,
        *,
        broker_name: str,
        cluster: str,
        revive_queues: int,
        retry_v2: bool,
        broker_addr: str,
    ) -> Popper: ...
    def set_cold_reader(self, reader: _PopColdReader | None) -> None:
        """Tiered storage to read below the queues' local min offsets, or None."""
    @property
    def revive_topic(self) -> str: ...
    def pop(
        self,
        group: str,
        topic: str,
        queue_id: int,
        max_msgs: int,
        invisible_time: int,
        init_mode: int,
        tag_codes: list[int] | None,
        read_queues: Callable[[str], int | None],
        *,
        order: bool = False,
        blocked: list[int] = ...,
        keep: Callable[[dict[str, str]], bool] | None = None,
        priority_factor: int | None = None,
    ) -> Popped:
        """One pass over the pop's queues; `priority_factor` (the group's `priority.factor`) when
        the topic is a PRIORITY one: that share of pops reads the queues from the highest down."""
    def start_offset(
        self, group: str, topic: str, queue_id: int, init_mode: int, commit: bool = True
    ) -> int: ...
    @staticmethod
    def check_invisible_time(invisible_time: int) -> None:
        """BrokerError (INVALID_PARAMETER) unless 0 <= invisible_time <= 7 days in ms."""
    def check_offset(
        self,
        read_queues: Callable[[str], int | None],
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        past_max: bool,
    ) -> None: ...
    def ack(
        self,
        read_queues: Callable[[str], int | None],
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        extra_info: str,
    ) -> list[tuple[str, int, int, int]]:
        """The `ack` message stored: [(topic, queue id, next offset, tags code)]."""
    def change_invisible(
        self,
        read_queues: Callable[[str], int | None],
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        extra_info: str,
        invisible_time: int,
    ) -> tuple[tuple[int, int, int], list[tuple[str, int, int, int]]]:
        """((popTime, invisibleTime, reviveQid), what was stored)."""
    def put_revive(
        self, queue_id: int, tag: str, body: bytes, uniq_key: str, deliver_ms: int
    ) -> tuple[str, int, int, int]: ...

@final
class Sender:
    """The broker's send rules (crates/broker/src/sender.rs) for one set of settings: queue,
    flags, property edits, the store call, and when and with which code the producer is answered.
    The data plane serves its sends with the same object."""

    def __new__(
        cls,
        store: Store,
        *,
        ha: HaMaster | None,
        sync_flush: bool,
        sync_master: bool,
        ack_alone: bool,
        slave_timeout_ms: int,
        cluster: str,
        region: str,
        trace_on: bool,
        reads_wait_for_replicas: bool = False,
        broker_name: str = "broker-a",
    ) -> Sender: ...
    def send(
        self,
        route: TopicRoute,
        producer_group: str,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: str,
        *,
        flag: int,
        sys_flag: int,
        born_timestamp: int,
        born_host: str,
        reconsume_times: int,
        batch: bool,
        dead_letter_topic: str | None = None,
        half: bool = False,
    ) -> SendOutcome:
        """Stores a send by the rules, redirected to `dead_letter_topic` or (`half`) the
        transaction half topic when the broker decided so; a refusal raises its
        `ferromq.errors` class with the code the data plane answers."""
    def settle(
        self, outcome: SendOutcome, arrived: Callable[[], None], answered: Callable[[int], None]
    ) -> int | None:
        """The reply code when known now (`arrived()` called); else None, and `arrived()` then
        `answered(code)` run later on the flush or HA thread."""

@final
class DataPlane:
    """The broker's port served on Rust threads: plain sends Python allows are answered there,
    every other frame is handed to Python as an event."""

    def __new__(
        cls,
        host: str,
        port: int,
        *,
        threads: int,
        max_frame: int,
        max_connections: int,
        max_connections_per_address: int,
        idle_timeout_ms: int,
        read_timeout_ms: int,
        request_buffer_bytes: int,
        reply_buffer_bytes: int,
        total_reply_buffer_bytes: int,
        rpc_buckets_ms: list[float],
        tls: _PlaneTls | None = None,
    ) -> DataPlane:
        """`tls`: TLS clients served too (rustls), beside plain ones in mode permissive, instead
        of them in enforcing; a `ValueError` says which part of it is unusable."""
    @property
    def port(self) -> int: ...
    @property
    def wake_fd(self) -> int: ...
    @property
    def open_connections(self) -> int: ...
    @property
    def buffered_request_bytes(self) -> int: ...
    @property
    def waiting_for_budget(self) -> int: ...
    def take_events(self) -> list[tuple[int, int, Any]]:
        """(0, conn, (host, port)) opened, (1, conn, bytes) frames, (2, conn, reason) closed,
        (4, conn, None) its queued replies drained to half their bound."""
    def take_arrivals(self) -> list[tuple[str, int, int, list[int] | None]]: ...
    def set_watching(self, on: bool) -> None: ...
    def take_stats(
        self,
    ) -> tuple[
        list[tuple[str, int, int, int]],
        list[tuple[int, int]],
        list[tuple[int, int, list[int], float]],
        list[tuple[str, str, int, int, int, int, int, int]],
    ]:
        """Puts per topic, store-call milliseconds, request latencies, and per (group, topic,
        queue) of pulls: (next offset, found, missed, messages, bytes)."""
    def serve_sends(
        self,
        sender: Sender,
        topics: dict[str, TopicRoute],
        acl: tuple[int, list[tuple[str, str, list[str]]]] | None = None,
    ) -> None:
        """Plain sends to `topics` served here by `sender`'s rules. With `acl` ((ACL load,
        [(access key, secret key, topics it may send to)])) a send is served only when its
        signature is the account's or `set_peer_acl` says the peer needs none; every other goes
        to Python."""
    def set_peer_acl(self, conn: int, generation: int, globally_white: bool, white: list[str]) -> bool:
        """What ACL load `generation` decided about `conn`'s peer address; False when it is gone."""
    def stop_serving_sends(self) -> None: ...
    def serve_pulls(
        self,
        store: Store,
        *,
        topics: list[tuple[str, int]],
        groups: list[str],
        subscriptions: list[tuple[str, str, int, list[int] | None]],
        short_polling_ms: int | None,
        check_interval_ms: int,
        offsets: ConsumerOffsets,
        acl: tuple[int, list[tuple[str, str, list[str], list[str]]]] | None = None,
        popper: Popper | None = None,
        priority_topics: list[str] = ...,
        priority_factors: list[tuple[str, int]] = ...,
    ) -> None:
        """Pulls from readable `topics` ((name, read queues)) by `groups` with their TAG
        `subscriptions` ((group, topic, version, tags codes or None for any)) are served here,
        committing into `offsets`; with `acl` ((ACL load, [(access key, secret key, topics, groups
        it may pull)])) only those signed by an account allowed both, or from a peer
        `set_peer_acl` says needs no signature. With `popper`, pops, acks and changes of
        invisible time by its rules too, those of `priority_topics` by the groups'
        `priority_factors` ((group, factor); 100 for a group not listed)."""
    def stop_serving_pulls(self) -> None: ...
    def notify_arrival(
        self, topic: str, queue_id: int, next_offset: int, tags_code: int | None = None
    ) -> None: ...
    @property
    def held_pulls(self) -> int: ...
    @property
    def waiting_pops(self) -> int:
        """Pops waiting here for a message (remoting pops and the gRPC front's receives)."""
    def write(self, conn: int, data: bytes) -> int: ...
    def close(self, conn: int, abort: bool, reason: str) -> None: ...
    def set_reading(self, conn: int, reading: bool) -> None: ...
    def closed_by_reason(self) -> list[tuple[str, int]]: ...
    def stop(self, grace_ms: int) -> None: ...

@final
class GrpcFront:
    """The gRPC port served on Rust threads (crates/grpc): TLS and plain clients as the data
    plane tells them apart, HTTP/2, SendMessage served there (see `plane`), the calls to
    `inbox_methods` handed to Python directly (`take_calls`), every other call handed on to
    grpcio on the Unix socket `upstream`; both with the client's `ip:port` in the
    `x-ferromq-peer` header."""

    def __new__(
        cls,
        host: str,
        port: int,
        upstream: str | PathLike[str],
        *,
        threads: int = 2,
        tls: _PlaneTls | None = None,
        plane: DataPlane | None = None,
        on_dead_letter: Callable[[str, str, str, int, str], None] | None = None,
        inbox_methods: list[str] = ...,
        max_connections: int = 10_000,
        max_connections_per_address: int = 1_000,
        idle_timeout_ms: int = 120_000,
    ) -> GrpcFront:
        """Binds `host:port` (0: any free port); OSError(errno, ...) when it cannot. `tls` as the
        data plane's; a `ValueError` says which part of it is unusable. With `plane`, SendMessage
        is served by the front on that plane's sends (the topics it serves, its send rules) when
        the call is not Python's to decide; with `on_dead_letter` too, the receives and acks of
        the clients named by `serve_client`, a message popped past the client's retry policy
        handed to `on_dead_letter(group, topic, receipt, commit_log_offset, message_id)` (called
        on the front's thread) instead of delivered. The calls to `inbox_methods` (paths) that
        the front does not serve are Python's to take (`take_calls`) and answer, not grpcio's
        (but for compressed ones, those larger than 8 MiB, and those past 20,000 waiting). At
        most `max_connections` clients are served at once (at the cap the longest idle makes
        room), `max_connections_per_address` from one address (past it a new one is closed); one
        without a call for
        `idle_timeout_ms` (0: never) is closed, and so is one whose HTTP/2 preface has not come
        within 10 s (or the idle timeout if shorter)."""
    @property
    def port(self) -> int: ...
    @property
    def open_connections(self) -> int:
        """Client connections open now."""
    @property
    def sends_answered(self) -> int:
        """SendMessage calls the front answered itself (on the data plane) so far."""
    @property
    def receives_answered(self) -> int:
        """ReceiveMessage and AckMessage calls the front answered itself so far."""
    def serve_client(self, client_id: str, max_attempts: int) -> None:
        """The receives and acks of `client_id` are served by the front from now on (a simple
        consumer whose retry policy allows `max_attempts` deliveries, 0: unknown)."""
    def forget_client(self, client_id: str) -> None:
        """The receives and acks of `client_id` reach Python from now on."""
    @property
    def inbox_fd(self) -> int | None:
        """Readable while calls for Python wait (`take_calls`); None without `inbox_methods`."""
    @property
    def inbox_answered(self) -> int:
        """Calls Python answered through the inbox so far."""
    def take_calls(
        self,
    ) -> tuple[list[tuple[int, str, list[tuple[str, str]], int | None, bytes]], list[int]]:
        """The calls handed to Python since the last take, each (id, method path, metadata as (key,
        value) pairs, timeout in ms or None, request message), and the ids of calls cancelled since
        (their clients went; some may be among the calls of this take)."""
    def answer(self, id: int, replies: list[bytes]) -> bool:
        """Answers call `id` with `replies` (encoded messages, one for a unary call) and gRPC status
        OK; False when the call is no longer waiting (its client went)."""
    def refuse(self, id: int, code: int, message: str) -> bool:
        """Answers call `id` with gRPC status `code` (not OK) and `message`; False when the call is
        no longer waiting."""
    def stop(self, grace_ms: int = 1000) -> None:
        """Stops accepting and tells every client to go; connections still busy after
        `grace_ms` are closed. Idempotent."""

@final
class HaSlave:
    """A slave's replication from its master's HA address."""

    def __new__(
        cls,
        store: Store,
        master_addr: str | None = None,
        *,
        heartbeat_interval_ms: int = 5000,
        housekeeping_interval_ms: int = 20000,
    ) -> HaSlave: ...
    def update_master_address(self, addr: str) -> None: ...
    def status(self) -> tuple[str | None, bool, int, str | None]: ...
    @property
    def local_addr(self) -> str | None: ...
    def close(self) -> None: ...

def java_hash(s: str) -> int: ...
def tags_code(tags: str | None) -> int: ...
def parse_tag_expression(expression: str) -> list[str] | None:
    """The tags of a TAG subscription expression, sorted and each once; None takes every message;
    ValueError when it names no tag."""

def get_property(properties: str, name: str) -> str | None: ...
def decode_properties(properties: str) -> dict[str, str]:
    """A properties string as Java's decoder reads it into its map: entries without a name or a
    value dropped, a repeated name in its first position with its last value."""

def encode_properties(props: Mapping[str, object]) -> str:
    """`props` as a client writes them: in order, an empty name or a None value left out, any
    other value as its `str()`; ValueError for a name or value holding a separator."""

# The remoting frame as the data plane reads and writes it (ferromq_remoting::frame); Python's
# codec, ferromq.protocol.command, is held to it by tests/unit/test_frame_codecs_agree.py.

def frame_length(buf: bytes, max_frame: int) -> int | None:
    """The size of the frame at the head of `buf` (length prefix included), None when more bytes
    are needed; ValueError for a length outside 4..`max_frame`."""

def read_frame(
    frame: bytes,
) -> tuple[int, tuple[int, int, int, int, dict[str, str] | None] | None, bytes] | None:
    """A whole frame as the data plane reads it: (serialize type, the JSON header's (code, opaque,
    flag, version, ext fields as text or None when they are not an object of scalars) or None when
    the plane does not read the header, body); None when the header length overruns the frame."""

def json_reply(
    code: int, opaque: int, remark: str | None, ext: list[tuple[str, str]], body: bytes = ...
) -> bytes:
    """The JSON reply frame the data plane writes."""

def offset_msg_id(store_host: str, physical_offset: int) -> str: ...
def decode_offset_msg_id(msg_id: str) -> tuple[str, int]: ...
def truncate_commitlog(store: Store, end: int) -> None: ...
def decode_records(
    buf: bytes, check_crc: bool = False
) -> list[tuple[str, int, int, int, int, int, int, int, str, int, str, int, int, str, bytes, str]]: ...
def decode_columns(buf: bytes, filter: RowFilter) -> dict[str, Any]: ...

# The rules of a 5.x client's messages (ferromq_grpc::convert); a refusal is ValueError(code, message).

def grpc_check_lite_topic(lite: str) -> None:
    """ValueError(code, message) for a lite topic a 5.x client may not send to or subscribe
    (GrpcValidator.validateLiteTopic)."""

def grpc_check_topic(name: str, reserved: list[str] = ...) -> None:
    """ValueError(ILLEGAL_TOPIC, text) when a 5.x client may not name topic `name` (nor one of
    `reserved`, the broker's own system topics)."""

def grpc_check_group(name: str) -> None:
    """ValueError(ILLEGAL_CONSUMER_GROUP, text) when a 5.x client may not name group `name`."""

def grpc_check_invisible(ms: int, min_ms: int | None = None) -> None:
    """ValueError(ILLEGAL_INVISIBLE_TIME, text) for an invisible duration outside [min_ms, 12 h]
    (min_ms None: a receive's minimum, 10 s)."""

def grpc_polling_time(
    long_polling_ms: int | None, request_timeout_ms: int | None, remaining_ms: int | None
) -> int:
    """How long a receive that finds nothing waits (ms), as the proxy reckons it: the long polling
    timeout, else the time left less half the request timeout; within [5 s, 20 s]; cut to the
    time left (None: no deadline). ValueError(ILLEGAL_POLLING_TIME, text) when under 5 s are left."""

def grpc_send_failure(code: int, name: str) -> tuple[int, str]:
    """The SendResultEntry's (code, text) of a send the broker answered with `code` (named
    `name`), not SUCCESS."""

def grpc_outgoing(message: bytes, peer: str, now_ms: int) -> tuple[str, int, int, str, str | None]:
    """A serialized v2 `Message` from `peer`, checked and made a RocketMQ message: its encoded
    properties, system flag, born timestamp (0: none given), type name and FIFO message group."""

def grpc_message(records: bytes, topic: str | None = None) -> bytes:
    """The first of `records` as the v2 `Message` a 5.x client is shown (serialized), of `topic`
    (None: the record's own)."""

def grpc_popped(
    body: bytes,
    topic: str,
    broker_name: str,
    pop_time: int,
    invisible_time: int,
    revive_qid: int,
    starts: dict[int, int],
    lite_counts: list[int] | None = None,
) -> list[bytes]:
    """A pop's records as the v2 messages a 5.x client receives (serialized), each with its receipt
    handle; `starts`: where the pop started reading each queue of `topic` itself. `lite_counts`: the
    records of a lite pop (POP_LITE_MESSAGE) with each one's order count: receipts name the light
    message queue's offset (as 5.5.0's client API makes them), delivery attempts are count + 1."""

def fifo_queue(group: str, queues: int) -> int:
    """The write queue of FIFO message group `group` among `queues` (the proxy's consistent hash)."""

def pop_retry_topic(topic: str, group: str, v2: bool = False) -> str:
    """The retry topic of `group` popping `topic`: `%RETRY%<group>_<topic>`, v2 `+`."""

def pop_retry_mark(topic: str) -> str:
    """The kind of topic a receipt names: "0" normal, "1" v1 retry, "2" v2 retry."""

def pop_real_topic(topic: str, group: str, mark: str) -> str:
    """The topic a receipt's message lies in (the retry topic for marks 1 and 2)."""

def pop_receipt(text: str) -> str | None:
    """A receipt (`POP_CK`, an ack's `extraInfo`) as the POP rules read and write it back; None
    when they do not read it as one."""

def pop_checkpoint(
    topic: str,
    group: str,
    queue_id: int,
    start_offset: int,
    diffs: Sequence[int],
    pop_time: int,
    invisible_time: int,
    broker_name: str,
) -> tuple[bytes, str]:
    """The `ck` message (body, UNIQ_KEY) the POP rules write for a pop of the messages at `diffs`
    past `start_offset`."""

def pop_ack(
    topic: str,
    group: str,
    queue_id: int,
    ack_offset: int,
    start_offset: int,
    pop_time: int,
    broker_name: str,
) -> tuple[bytes, str]:
    """The `ack` message (body, UNIQ_KEY) the POP rules write for an ack of `ack_offset`."""

def index_segment(
    path: str | PathLike[str], start: int
) -> tuple[int, int, int, list[tuple[str, int, int, int, int]], bytes, bytes]:
    """What tiered storage keeps beside a sealed CommitLog file (ferromq_store::segment_index):
    (end, min store time, max store time, runs (topic, queue id, first offset, count, unit
    index), the units, the keys)."""
