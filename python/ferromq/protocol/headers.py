"""Typed request and response headers (RocketMQ's `CommandCustomHeader`s) and typed access to a
request's `extFields`, with RocketMQ's rules: every value travels as text; booleans are Java's
(`true`, any case) or the C++ client's (`1`); a field Java declares `int` is refused past an int.

A header is a slotted dataclass of snake_case attributes whose wire keys are their camelCase (or
what `WIRE` names): `from_ext` reads one from a command's `extFields` (a missing required field, or
text that is not a number, raises `MissingHeaderFieldError` naming the field), `to_ext` writes it
(None fields are left out). A field's kind comes from its annotation: `str`, `int`, `bool` or
one of them `| None`; fields without a default are required. The send header, on the hot
path, is written out by hand."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar, dataclass_transform

from ferromq.errors import MissingHeaderFieldError
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.constants import (
    AUTO_CREATE_TOPIC_KEY,
    DEFAULT_TOPIC_QUEUE_NUMS,
    PULL_FLAG_SUBSCRIPTION,
    UNIQUE_KEY_QUERY,
)

JAVA_INT_MIN, JAVA_INT_MAX = -(2**31), 2**31 - 1
JAVA_LONG_MIN, JAVA_LONG_MAX = -(2**63), 2**63 - 1

# Header fields that are a Java `int` in RocketMQ's request headers (the others are `long`s):
# a value past an int is refused as Java's Integer.parseInt refuses it.
INT_FIELDS = frozenset(
    {
        "queueId",
        "maxMsgNums",
        "sysFlag",
        "flag",
        "readQueueNums",
        "writeQueueNums",
        "perm",
        "topicSysFlag",
        "reconsumeTimes",
        "maxReconsumeTimes",
        "delayLevel",
        "defaultTopicQueueNums",
        "maxNum",
    }
)


def java_number(value: str, key: str) -> int:
    """The header value as Java parses it: an int for `INT_FIELDS`, a long otherwise. Raises
    MissingHeaderFieldError naming the field for text that is not such a number."""
    try:
        n = int(value)
    except ValueError:
        raise MissingHeaderFieldError(f"the custom field <{key}> is not a number: {value[:64]!r}") from None
    kind, low, high = (
        ("an int", JAVA_INT_MIN, JAVA_INT_MAX)
        if key in INT_FIELDS
        else ("a long", JAVA_LONG_MIN, JAVA_LONG_MAX)
    )
    if not low <= n <= high:
        raise MissingHeaderFieldError(f"the custom field <{key}> is out of the range of {kind}: {value[:64]}")
    return n


def java_bool(value: str) -> bool:
    return value.lower() == "true" or value == "1"


def ext_str(cmd: RemotingCommand, key: str, default: str | None = None) -> str:
    value = cmd.ext.get(key)
    if value is None:
        if default is None:
            raise MissingHeaderFieldError(f"the custom field <{key}> is null")
        return default
    return value


def ext_int(cmd: RemotingCommand, key: str, default: int | None = None) -> int:
    value = cmd.ext.get(key)
    if value is None or value == "":
        if default is None:
            raise MissingHeaderFieldError(f"the custom field <{key}> is null")
        return default
    return java_number(value, key)


def ext_offset(cmd: RemotingCommand, key: str, default: int | None = None) -> int:
    """`ext_int` for an offset or a queue id: it must not be negative."""
    n = ext_int(cmd, key, default)
    if n < 0:
        raise MissingHeaderFieldError(f"the custom field <{key}> must not be negative: {n}")
    return n


def ext_bool(cmd: RemotingCommand, key: str, default: bool = False) -> bool:
    value = cmd.ext.get(key)
    if value is None:
        return default
    return java_bool(value)


# -- the declarative headers -----------------------------------------------------------------------

_STR, _OPT_STR, _INT, _OPT_INT, _BOOL, _OPT_BOOL = range(6)
_KINDS = {
    "str": _STR,
    "str | None": _OPT_STR,
    "int": _INT,
    "int | None": _OPT_INT,
    "bool": _BOOL,
    "bool | None": _OPT_BOOL,
}
_REQUIRED: Any = object()

H = TypeVar("H", bound="Header")


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(p[:1].upper() + p[1:] for p in rest)


@dataclass(frozen=True, slots=True)
class _Field:
    attr: str
    key: str
    kind: int
    default: Any
    non_negative: bool


_SPECS: dict[type, tuple[_Field, ...]] = {}


def _declared(cls: type[Header]) -> list[tuple[str, str, Any]]:
    """(name, annotation, default or _REQUIRED) of the fields a header class declares, in order."""
    out = []
    for klass in reversed(cls.__mro__):
        for name, annotation in inspect.get_annotations(klass).items():
            if not str(annotation).startswith("ClassVar"):
                out.append((name, str(annotation), klass.__dict__.get(name, _REQUIRED)))
    return out


def _spec(cls: type[Header]) -> tuple[_Field, ...]:
    spec = _SPECS.get(cls)
    if spec is None:
        spec = tuple(
            _Field(
                name,
                cls.WIRE.get(name) or _camel(name),
                _KINDS[kind],
                default,
                name in cls.NON_NEGATIVE,
            )
            for name, kind, default in _declared(cls)
        )
        _SPECS[cls] = spec
    return spec


def _missing(key: str) -> MissingHeaderFieldError:
    return MissingHeaderFieldError(f"the custom field <{key}> is null")


def _negative(key: str, n: int) -> MissingHeaderFieldError:
    return MissingHeaderFieldError(f"the custom field <{key}> must not be negative: {n}")


# A header's reader and writer are generated once per class, as straight-line code (as
# `dataclasses` makes `__init__`): a loop over the fields costs twice the hand-written reads.
_READERS: dict[type, Callable[[Mapping[str, str]], Any]] = {}
_WRITERS: dict[type, Callable[[Any], dict[str, str]]] = {}


def _compile(name: str, lines: list[str], env: dict[str, Any]) -> Any:
    namespace: dict[str, Any] = {}
    exec("\n".join(lines), env, namespace)
    return namespace[name]


def _reader(cls: type[Header]) -> Callable[[Mapping[str, str]], Any]:
    env: dict[str, Any] = {
        "cls": cls,
        "_new": object.__new__,
        "_missing": _missing,
        "_negative": _negative,
        "_number": java_number,
    }
    lines = ["def read(ext):"]
    args = []
    for i, f in enumerate(_spec(cls)):
        v, k, d = f"v{i}", repr(f.key), f"d{i}"
        env[d] = f.default
        required = f.default is _REQUIRED
        lines.append(f"    {v} = ext.get({k})")
        if f.kind in (_STR, _OPT_STR):
            lines += [
                f"    if {v} is None:",
                f"        raise _missing({k})" if required else f"        {v} = {d}",
            ]
        elif f.kind in (_BOOL, _OPT_BOOL):
            lines.append(f"    {v} = {d} if {v} is None else ({v}.lower() == 'true' or {v} == '1')")
        else:
            low, high = (
                (JAVA_INT_MIN, JAVA_INT_MAX) if f.key in INT_FIELDS else (JAVA_LONG_MIN, JAVA_LONG_MAX)
            )
            lines += [
                f"    if {v} is None or {v} == '':",
                f"        raise _missing({k})" if required else f"        {v} = {d}",
                "    else:",
                "        try:",
                f"            n = int({v})",
                "        except ValueError:",
                f"            n = _number({v}, {k})",  # raises, naming the field
                f"        if not {low} <= n <= {high}:",
                f"            _number({v}, {k})",  # raises the range error
            ]
            if f.non_negative:
                lines += ["        if n < 0:", f"            raise _negative({k}, n)"]
            lines.append(f"        {v} = n")
        args.append(f"{f.attr!r}: {v}")
    lines += ["    o = _new(cls)", f"    o.__dict__ = {{{', '.join(args)}}}", "    return o"]
    return _compile("read", lines, env)  # type: ignore[no-any-return]


def _writer(cls: type[Header]) -> Callable[[Any], dict[str, str]]:
    lines = ["def write(self):", "    out = {}"]
    for f in _spec(cls):
        k = repr(f.key)
        text = (
            "v"
            if f.kind in (_STR, _OPT_STR)
            else "('true' if v else 'false')"
            if f.kind in (_BOOL, _OPT_BOOL)
            else "str(v)"
        )
        lines += [f"    v = self.{f.attr}", "    if v is not None:", f"        out[{k}] = {text}"]
    lines.append("    return out")
    return _compile("write", lines, {})  # type: ignore[no-any-return]


@dataclass_transform(kw_only_default=True)
class Header:
    """Base of the declarative headers: a subclass declares its fields as annotated class
    attributes (a default makes a field optional) and is built with keywords. Not a dataclass:
    generating methods for some sixty classes at import costs tens of milliseconds per process."""

    # attribute -> wire key, where the key is not the attribute's camelCase
    WIRE: ClassVar[Mapping[str, str]] = {}
    # int attributes that must not be negative (queue ids, offsets)
    NON_NEGATIVE: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, **values: Any) -> None:
        for f in _spec(type(self)):
            if f.attr in values:
                value = values.pop(f.attr)
            elif f.default is _REQUIRED:
                raise TypeError(f"{type(self).__name__}() needs the keyword argument {f.attr!r}")
            else:
                value = f.default
            self.__dict__[f.attr] = value
        if values:
            raise TypeError(f"{type(self).__name__}() got unknown arguments {sorted(values)}")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.__dict__ == self.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __repr__(self) -> str:
        fields = ", ".join(f"{f.attr}={getattr(self, f.attr)!r}" for f in _spec(type(self)))
        return f"{type(self).__name__}({fields})"

    @classmethod
    def from_ext(cls: type[H], ext: Mapping[str, str]) -> H:
        read = _READERS.get(cls)
        if read is None:
            read = _READERS[cls] = _reader(cls)
        return read(ext)  # type: ignore[no-any-return]

    @classmethod
    def of(cls: type[H], cmd: RemotingCommand) -> H:
        """The header of a request or a response."""
        return cls.from_ext(cmd.ext)

    def to_ext(self) -> dict[str, str]:
        cls = type(self)
        write = _WRITERS.get(cls)
        if write is None:
            write = _WRITERS[cls] = _writer(cls)
        return write(self)


# -- send (the hot path: read in place, written out by hand) -----------------------------------------

# SendMessageRequestHeaderV2's one-letter names.
SEND_V2_NAMES = {
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
    "l": "maxReconsumeTimes",
    "m": "batch",
}
_SEND_V2_KEYS = {v: k for k, v in SEND_V2_NAMES.items()}
# Wire keys in the order `SendMessageRequestHeader.from_ext` reads them.
_SEND_FIELDS = (
    "producerGroup",
    "topic",
    "defaultTopic",
    "defaultTopicQueueNums",
    "queueId",
    "sysFlag",
    "bornTimestamp",
    "flag",
    "properties",
    "reconsumeTimes",
    "batch",
    "maxReconsumeTimes",
)
_SEND_V1_ORDER = _SEND_FIELDS
_INTS = range(JAVA_INT_MIN, JAVA_INT_MAX + 1)
_LONGS = range(JAVA_LONG_MIN, JAVA_LONG_MAX + 1)
_SEND_V2_ORDER = tuple(_SEND_V2_KEYS[f] for f in _SEND_FIELDS)


def send_names_v2(ext: Mapping[str, str]) -> bool:
    """Whether a send header uses SendMessageRequestHeaderV2's one-letter names. Either naming is
    read whatever the request code (the data plane's send.rs decides the same way)."""
    return "a" in ext and "producerGroup" not in ext


def _num(
    ext: Mapping[str, str], key: str, name: str, default: int | None = None, high: int = JAVA_INT_MAX
) -> int:
    """A number field under its wire key (a V2 letter) named by its long name, with the common case
    (a valid number within Java's int, or long with `high`) first."""
    try:
        n = int(ext[key])
        if -high - 1 <= n <= high:
            return n
    except (KeyError, ValueError):
        pass
    value = ext.get(key)
    if value is None or value == "":
        if default is None:
            raise MissingHeaderFieldError(f"the custom field <{name}> is null")
        return default
    return java_number(value, name)


@dataclass(slots=True)
class SendMessageRequestHeader:
    """SEND_MESSAGE's header (long names) and SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE's
    (SendMessageRequestHeaderV2: the letters a..m)."""

    producer_group: str
    topic: str
    default_topic: str = AUTO_CREATE_TOPIC_KEY
    default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS
    queue_id: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    flag: int = 0
    properties: str = ""
    reconsume_times: int = 0
    batch: bool = False
    max_reconsume_times: int | None = None
    unit_mode: bool = False

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> SendMessageRequestHeader:
        """Either naming, read in place (no renamed copy of the fields). `unitMode` is not read
        (the broker does not use it)."""
        kg, kt, kdt, kdq, kq, ksf, kbt, kf, kp, krt, kb, kmr = (
            _SEND_V2_ORDER if send_names_v2(ext) else _SEND_V1_ORDER
        )
        group = ext.get(kg)
        if group is None:
            raise MissingHeaderFieldError("the custom field <producerGroup> is null")
        topic = ext.get(kt)
        if topic is None:
            raise MissingHeaderFieldError("the custom field <topic> is null")
        default_topic = ext.get(kdt)
        max_rt = ext.get(kmr)
        batch = ext.get(kb)
        try:  # the common case first: every number there and in range
            dq, q, sf, bt, f, rt = (
                int(ext[kdq]),
                int(ext[kq]),
                int(ext[ksf]),
                int(ext[kbt]),
                int(ext[kf]),
                int(ext[krt]),
            )
            fast = dq in _INTS and q in _INTS and sf in _INTS and bt in _LONGS and f in _INTS and rt in _INTS
        except (KeyError, ValueError):
            fast = False
        if not fast:
            dq = _num(ext, kdq, "defaultTopicQueueNums", DEFAULT_TOPIC_QUEUE_NUMS)
            q = _num(ext, kq, "queueId")
            sf = _num(ext, ksf, "sysFlag", 0)
            bt = _num(ext, kbt, "bornTimestamp", 0, JAVA_LONG_MAX)
            f = _num(ext, kf, "flag", 0)
            rt = _num(ext, krt, "reconsumeTimes", 0)
        return cls(
            group,
            topic,
            AUTO_CREATE_TOPIC_KEY if default_topic is None else default_topic,
            dq,
            q,
            sf,
            bt,
            f,
            ext.get(kp, ""),
            rt,
            # Java sends "true"; the C++ client "1" (a Java broker would read that as false and
            # store the whole batch as one message; ferromq stores the messages of the batch).
            batch is not None and (batch == "1" or batch.lower() == "true"),
            int(max_rt) if max_rt and max_rt.lstrip("-").isdigit() else None,
        )

    def to_ext(self) -> dict[str, str]:
        """The long names (SEND_MESSAGE)."""
        return {SEND_V2_NAMES[k]: v for k, v in self.to_ext_v2().items()}

    def to_ext_v2(self) -> dict[str, str]:
        """The letters (SEND_MESSAGE_V2, SEND_BATCH_MESSAGE); `batch` only when set, as the
        producer has always sent it."""
        ext = {
            "a": self.producer_group,
            "b": self.topic,
            "c": self.default_topic,
            "d": str(self.default_topic_queue_nums),
            "e": str(self.queue_id),
            "f": str(self.sys_flag),
            "g": str(self.born_timestamp),
            "h": str(self.flag),
            "i": self.properties,
            "j": str(self.reconsume_times),
            "k": "true" if self.unit_mode else "false",
        }
        if self.max_reconsume_times is not None:
            ext["l"] = str(self.max_reconsume_times)
        if self.batch:
            ext["m"] = "true"
        return ext


@dataclass(slots=True)
class SendMessageResponseHeader:
    msg_id: str
    queue_id: int
    queue_offset: int
    msg_region: str | None = None
    trace_on: bool | None = None
    transaction_id: str | None = None

    @classmethod
    def from_ext(cls, ext: Mapping[str, str], queue_id: int = -1) -> SendMessageResponseHeader:
        """Leniently, as a client reads an answer (`queue_id` when the broker names none)."""
        trace = ext.get("TRACE_ON")
        return cls(
            ext.get("msgId", ""),
            int(ext.get("queueId", queue_id)),
            int(ext.get("queueOffset", -1)),
            ext.get("MSG_REGION"),
            None if trace is None else java_bool(trace),
            ext.get("transactionId"),
        )

    def to_ext(self) -> dict[str, str]:
        if self.msg_region is not None and self.trace_on is not None and self.transaction_id is None:
            return self.broker_ext(
                self.msg_id, self.queue_id, self.queue_offset, self.msg_region, self.trace_on
            )
        ext = {"msgId": self.msg_id, "queueId": str(self.queue_id), "queueOffset": str(self.queue_offset)}
        if self.msg_region is not None:
            ext["MSG_REGION"] = self.msg_region
        if self.trace_on is not None:
            ext["TRACE_ON"] = "true" if self.trace_on else "false"
        if self.transaction_id is not None:
            ext["transactionId"] = self.transaction_id
        return ext

    @staticmethod
    def broker_ext(
        msg_id: str, queue_id: int, queue_offset: int, msg_region: str, trace_on: bool
    ) -> dict[str, str]:
        """`to_ext` of the header a broker answers a send with, without the object (the hot path)."""
        return {
            "msgId": msg_id,
            "queueId": str(queue_id),
            "queueOffset": str(queue_offset),
            "MSG_REGION": msg_region,
            "TRACE_ON": "true" if trace_on else "false",
        }


class _TopicQueue(Header):
    """A header naming a queue: a negative queue id is refused."""

    NON_NEGATIVE: ClassVar[frozenset[str]] = frozenset({"queue_id"})


# -- pull and consume progress ---------------------------------------------------------------------


class PullMessageRequestHeader(_TopicQueue):
    consumer_group: str
    topic: str
    queue_id: int
    # A negative offset is "too small", as in Java 4.9.7: PULL_OFFSET_MOVED to the queue's min.
    queue_offset: int
    max_msg_nums: int = 32
    sys_flag: int = 0
    commit_offset: int = -1
    suspend_timeout_millis: int = 15000
    subscription: str | None = None
    sub_version: int = 0
    expression_type: str | None = None

    @classmethod
    def read_only(
        cls, consumer_group: str, topic: str, queue_id: int, queue_offset: int, max_msg_nums: int
    ) -> PullMessageRequestHeader:
        """A tool's read of a queue: not held, commits nothing, every tag (`*`)."""
        return cls(
            consumer_group=consumer_group,
            topic=topic,
            queue_id=queue_id,
            queue_offset=queue_offset,
            max_msg_nums=max_msg_nums,
            sys_flag=PULL_FLAG_SUBSCRIPTION,
            commit_offset=0,
            suspend_timeout_millis=0,
            subscription="*",
            sub_version=0,
            expression_type="TAG",
        )


class PullMessageResponseHeader(Header):
    suggest_which_broker_id: int
    next_begin_offset: int
    min_offset: int
    max_offset: int

    @staticmethod
    def next_begin_offset_of(ext: Mapping[str, str], default: int) -> int:
        """A pull answer's nextBeginOffset, or `default` when it names none (a refusal)."""
        value = ext.get("nextBeginOffset")
        return default if value is None else int(value)


class ConsumerSendMsgBackRequestHeader(Header):
    offset: int
    group: str
    delay_level: int = 0
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = None
    NON_NEGATIVE: ClassVar[frozenset[str]] = frozenset({"offset"})


class GetConsumerListByGroupRequestHeader(Header):
    consumer_group: str


class QueryConsumerOffsetRequestHeader(_TopicQueue):
    consumer_group: str
    topic: str
    queue_id: int


class UpdateConsumerOffsetRequestHeader(_TopicQueue):
    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: int


class GetMaxOffsetRequestHeader(_TopicQueue):
    topic: str
    queue_id: int


class GetMinOffsetRequestHeader(_TopicQueue):
    topic: str
    queue_id: int


class GetEarliestMsgStoretimeRequestHeader(_TopicQueue):
    topic: str
    queue_id: int


class SearchOffsetRequestHeader(_TopicQueue):
    topic: str
    queue_id: int
    timestamp: int


class OffsetResponseHeader(Header):
    """The answer of QUERY_CONSUMER_OFFSET, GET_MAX_OFFSET, GET_MIN_OFFSET and
    SEARCH_OFFSET_BY_TIMESTAMP (Java's four `...ResponseHeader`s with one `offset`)."""

    offset: int


class GetEarliestMsgStoretimeResponseHeader(Header):
    timestamp: int


class NotifyConsumerIdsChangedRequestHeader(Header):
    consumer_group: str


# -- clients -----------------------------------------------------------------------------------------


class UnregisterClientRequestHeader(Header):
    client_id: str
    producer_group: str | None = None
    consumer_group: str | None = None
    WIRE: ClassVar[Mapping[str, str]] = {"client_id": "clientID"}


class EndTransactionRequestHeader(Header):
    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    commit_or_rollback: int
    from_transaction_check: bool = False
    msg_id: str | None = None
    transaction_id: str | None = None
    NON_NEGATIVE: ClassVar[frozenset[str]] = frozenset({"commit_log_offset"})


class CheckTransactionStateRequestHeader(Header):
    tran_state_table_offset: int
    commit_log_offset: int
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None


# -- messages by key or offset -----------------------------------------------------------------------


class QueryMessageRequestHeader(Header):
    topic: str
    key: str
    max_num: int | None = None
    begin_timestamp: int = 0
    end_timestamp: int = JAVA_LONG_MAX
    # Only sent when set: a Java broker leaves it out of the content it checks an ACL signature of.
    unique_key_query: bool | None = None
    WIRE: ClassVar[Mapping[str, str]] = {"unique_key_query": UNIQUE_KEY_QUERY}


class QueryMessageResponseHeader(Header):
    index_last_update_timestamp: int
    index_last_update_phyoffset: int


class ViewMessageRequestHeader(Header):
    offset: int
    NON_NEGATIVE: ClassVar[frozenset[str]] = frozenset({"offset"})


# -- topics and groups ---------------------------------------------------------------------------------


class CreateTopicRequestHeader(Header):
    topic: str
    default_topic: str | None = None
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = 6
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    # RocketMQ 5.x: attribute changes, `+key=value` to set and `-key` to remove, comma-separated.
    attributes: str | None = None


class DeleteTopicRequestHeader(Header):
    topic: str


class GetSubscriptionGroupConfigRequestHeader(Header):
    group: str


class DeleteSubscriptionGroupRequestHeader(Header):
    group_name: str
    remove_offset: bool = False
    """4.x's name of the flag; 5.x sends `cleanOffset`."""
    clean_offset: bool = False


class GetTopicsByClusterRequestHeader(Header):
    cluster: str


class GetRouteInfoRequestHeader(Header):
    topic: str


# -- admin and status -------------------------------------------------------------------------------


class GetTopicStatsInfoRequestHeader(Header):
    topic: str


class GetTopicConfigRequestHeader(Header):
    topic: str
    lo: bool | None = None


class GetParentTopicInfoRequestHeader(Header):
    topic: str


class GetLiteTopicInfoRequestHeader(Header):
    parent_topic: str
    lite_topic: str


class GetLiteClientInfoRequestHeader(Header):
    parent_topic: str
    group: str
    client_id: str
    max_count: int = 1000


class GetLiteGroupInfoRequestHeader(Header):
    group: str
    lite_topic: str | None = None
    top_k: int = 0


class TriggerLiteDispatchRequestHeader(Header):
    group: str
    client_id: str | None = None


class PopLiteMessageRequestHeader(Header):
    client_id: str
    consumer_group: str
    topic: str
    max_msg_num: int
    invisible_time: int
    poll_time: int = 0
    born_time: int = 0
    attempt_id: str | None = None


class NotifyUnsubscribeLiteRequestHeader(Header):
    lite_topic: str
    consumer_group: str
    client_id: str


class GetConsumerConnectionListRequestHeader(Header):
    consumer_group: str


class GetProducerConnectionListRequestHeader(Header):
    producer_group: str


class GetConsumeStatsRequestHeader(Header):
    consumer_group: str
    topic: str | None = None


class GetConsumeStatsInBrokerHeader(Header):
    is_order: bool = False


class CloneGroupOffsetRequestHeader(Header):
    src_group: str
    dest_group: str
    topic: str | None = None
    offline: bool = False


class ResetOffsetRequestHeader(Header):
    """INVOKE_BROKER_TO_RESET_OFFSET, and RESET_CONSUMER_CLIENT_OFFSET from the broker to clients."""

    topic: str
    group: str
    timestamp: int
    is_force: bool = False


class GetConsumerRunningInfoRequestHeader(Header):
    consumer_group: str
    client_id: str
    jstack_enable: bool = False


class ConsumeMessageDirectlyResultRequestHeader(Header):
    consumer_group: str
    client_id: str
    msg_id: str
    broker_name: str | None = None


class QueryTopicConsumeByWhoRequestHeader(Header):
    topic: str


class QueryConsumeTimeSpanRequestHeader(Header):
    topic: str
    group: str


class QueryConsumeQueueRequestHeader(Header):
    topic: str
    queue_id: int
    index: int
    count: int = 10
    consumer_group: str | None = None


class ViewBrokerStatsDataRequestHeader(Header):
    stats_name: str
    stats_key: str


class GetBrokerConfigResponseHeader(Header):
    version: str


# -- ACL ------------------------------------------------------------------------------------------------


class CreateAccessConfigRequestHeader(Header):
    access_key: str
    secret_key: str | None = None
    white_remote_address: str | None = None
    default_topic_perm: str | None = None
    default_group_perm: str | None = None
    topic_perms: str | None = None
    group_perms: str | None = None
    admin: bool = False


class DeleteAccessConfigRequestHeader(Header):
    access_key: str


class UpdateGlobalWhiteAddrsConfigRequestHeader(Header):
    global_white_addrs: str
    # Required, as Java's header has it (empty: the default file).
    acl_file_full_path: str


class GetBrokerAclConfigResponseHeader(Header):
    version: str
    all_acl_file_version: str
    broker_name: str
    broker_addr: str
    cluster_name: str


# -- name server ----------------------------------------------------------------------------------------


class RegisterBrokerRequestHeader(Header):
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int
    ha_server_addr: str = ""
    compressed: bool = False
    body_crc32: int = 0


class UnRegisterBrokerRequestHeader(Header):
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


class RegisterBrokerResponseHeader(Header):
    ha_server_addr: str | None = None
    master_addr: str | None = None


class BrokerNameRequestHeader(Header):
    """WIPE_WRITE_PERM_OF_BROKER and ADD_WRITE_PERM_OF_BROKER."""

    broker_name: str


class WipeWritePermOfBrokerResponseHeader(Header):
    wipe_topic_count: int


class AddWritePermOfBrokerResponseHeader(Header):
    add_topic_count: int


class PutKVConfigRequestHeader(Header):
    namespace: str
    key: str
    value: str


class GetKVConfigRequestHeader(Header):
    """GET_KV_CONFIG and DELETE_KV_CONFIG."""

    namespace: str
    key: str


class GetKVConfigResponseHeader(Header):
    value: str | None = None


class GetKVListByNamespaceRequestHeader(Header):
    namespace: str


class QueryDataVersionRequestHeader(Header):
    broker_addr: str = ""


class QueryDataVersionResponseHeader(Header):
    changed: bool
