"""The ferromq error hierarchy. Each error carries the RocketMQ response code a broker answers with.

The Rust extension raises the store errors below by name (`_store.STORE_ERROR_CLASSES`, checked
by tests/unit/test_errors.py), so this module is their only home.
"""

from __future__ import annotations

from ferromq.protocol.codes import ResponseCode


class FerroMQError(Exception):
    """Base of every ferromq error. A broker answers a request that raised it with `code`."""

    code: ResponseCode = ResponseCode.SYSTEM_ERROR

    def __init__(self, message: str = "", code: ResponseCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class ConfigError(FerroMQError):
    """A configuration file (broker.conf, the controller's) or its values have problems; the
    message lists all of them with their lines."""


class StoreError(FerroMQError):
    """The message store refused or failed an operation."""


class StoreIOError(StoreError, OSError):
    """Reading, writing, mapping or syncing a store file failed."""


class MessageIllegalError(StoreError, ValueError):
    """The message breaks a store limit (RocketMQ: MESSAGE_ILLEGAL)."""

    code = ResponseCode.MESSAGE_ILLEGAL


class MessageTooLargeError(MessageIllegalError):
    """The body is larger than `max_message_size`."""


class PropertiesTooLargeError(MessageIllegalError):
    """The properties string is longer than 32767 bytes."""


class InvalidTopicError(MessageIllegalError):
    """The topic is empty, longer than 127 bytes, or has characters outside `[%|a-zA-Z0-9_-]`."""


class InvalidArgumentError(StoreError, ValueError):
    """An argument makes no sense (an offsetMsgId that is not one, a bad option value)."""


class CorruptStoreError(StoreError):
    """A store file cannot be what it claims to be (wrong size, broken record where one must be)."""


class NotAStoreError(StoreError, FileNotFoundError):
    """The directory holds no RocketMQ store (no `commitlog/`)."""


class StoreLockedError(StoreError):
    """Another process (a broker) holds the store's lock."""

    code = ResponseCode.SERVICE_NOT_AVAILABLE


class FlushDiskTimeoutError(StoreError):
    """SYNC_FLUSH: the message was stored but did not reach disk within `sync_flush_timeout_ms`."""

    code = ResponseCode.FLUSH_DISK_TIMEOUT


class DiskFullError(StoreError):
    """A write was refused before anything was stored: the disk is fuller than
    `diskSpaceWarningLevelRatio` or has no room left. Writes resume on their own when space returns."""

    code = ResponseCode.SERVICE_NOT_AVAILABLE


class DispatchBehindError(StoreError):
    """Stored messages are not yet in their consume queues (a file there could not be created);
    writes wait until the store has dispatched them, so that no queue offset is given twice."""

    code = ResponseCode.SERVICE_NOT_AVAILABLE


class ReadOnlyStoreError(StoreError):
    """A write was attempted on a store opened read-only."""

    code = ResponseCode.SERVICE_NOT_AVAILABLE


class StoreClosedError(StoreError):
    """The store was closed."""

    code = ResponseCode.SERVICE_NOT_AVAILABLE


class TimerDisabledError(StoreError):
    """A timer message was sent to a broker whose timer wheel is off (`timerWheelEnable=false`)."""

    code = ResponseCode.SYSTEM_ERROR


class TimerFlowControlError(StoreError):
    """A timer message was due in a slot holding more than `timerCongestNumEachSlot` messages."""

    code = ResponseCode.SYSTEM_ERROR


class DataLossError(StoreError):
    """Offsets a reader planned to read are gone (files deleted, store replaced)."""

    code = ResponseCode.PULL_OFFSET_MOVED


class BrokerError(FerroMQError):
    """A request the broker or name server refuses; the reply carries `code` and the message."""


class MissingHeaderFieldError(BrokerError):
    """A required header field is absent or not a number."""


class TopicNotExistError(BrokerError):
    code = ResponseCode.TOPIC_NOT_EXIST


class NoPermissionError(BrokerError):
    code = ResponseCode.NO_PERMISSION


class SubscriptionGroupNotExistError(BrokerError):
    code = ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST


class SubscriptionParseError(BrokerError):
    code = ResponseCode.SUBSCRIPTION_PARSE_FAILED


class QueryNotFoundError(BrokerError):
    code = ResponseCode.QUERY_NOT_FOUND


class ConnectionClosedError(FerroMQError):
    """The connection closed before the reply came."""

    code = ResponseCode.SYSTEM_ERROR


class RequestTimeoutError(FerroMQError, TimeoutError):
    """No reply within the request's timeout."""


__all__ = [
    "BrokerError",
    "ConnectionClosedError",
    "CorruptStoreError",
    "FerroMQError",
    "FlushDiskTimeoutError",
    "InvalidArgumentError",
    "InvalidTopicError",
    "MessageIllegalError",
    "MessageTooLargeError",
    "MissingHeaderFieldError",
    "NoPermissionError",
    "NotAStoreError",
    "PropertiesTooLargeError",
    "QueryNotFoundError",
    "ReadOnlyStoreError",
    "RequestTimeoutError",
    "ResponseCode",
    "StoreClosedError",
    "StoreError",
    "StoreIOError",
    "StoreLockedError",
    "SubscriptionGroupNotExistError",
    "SubscriptionParseError",
    "TopicNotExistError",
]
