"""The ferromq error hierarchy. Each error carries the RocketMQ response code a broker answers with.

The Rust extension raises the store errors below by name, so this module is their only home.
"""

from __future__ import annotations

from enum import IntEnum


class ResponseCode(IntEnum):
    """The RocketMQ response codes these errors map to (`ResponseCode.java`)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    FLUSH_DISK_TIMEOUT = 10
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17


class FerroMQError(Exception):
    """Base of every ferromq error."""

    code: ResponseCode = ResponseCode.SYSTEM_ERROR


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


class ReadOnlyStoreError(StoreError):
    """A write was attempted on a store opened read-only."""

    code = ResponseCode.SERVICE_NOT_AVAILABLE


class StoreClosedError(StoreError):
    """The store was closed."""

    code = ResponseCode.SERVICE_NOT_AVAILABLE


__all__ = [
    "CorruptStoreError",
    "FerroMQError",
    "FlushDiskTimeoutError",
    "InvalidArgumentError",
    "InvalidTopicError",
    "MessageIllegalError",
    "MessageTooLargeError",
    "NotAStoreError",
    "PropertiesTooLargeError",
    "ReadOnlyStoreError",
    "ResponseCode",
    "StoreClosedError",
    "StoreError",
    "StoreIOError",
    "StoreLockedError",
]
