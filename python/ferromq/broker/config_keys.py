"""broker.conf's keys and how they become `BrokerConfig` fields.

A field's key is `KEY_OF` (read from the config tables of `config_fields`, where each field
declares it); the pre-4.5 "maped" spellings are accepted too. Keys RocketMQ has but ferromq does
not use are logged and ignored, so existing broker.conf files keep working; any other key is
logged as unknown (with the known key it is probably a typo of), or is an error in strict mode. A
bad value is an error naming its key and line. The same table reads UPDATE_BROKER_CONFIG bodies
(`runtime_changes`, over the fields declared `runtime`) and writes GET_BROKER_CONFIG answers
(`BROKER_CONFIG_KEYS`, without the fields declared `secret`; `java_config_value`).

`ferromq.broker.config` re-exports these names; this module reads the fields of `config_fields`.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ferromq.broker.config_fields import KEY_OF, PROFILES, BrokerConfig
from ferromq.errors import ConfigError
from ferromq.properties import parse_properties
from ferromq.settings import flagged
from ferromq.store import FlushDiskType

logger = logging.getLogger(__name__)


# RocketMQ key -> field; the pre-4.5 "maped" spellings are accepted too.
_KEYS: dict[str, str] = {key: name for name, key in KEY_OF.items()}
_KEYS["mapedFileSizeCommitLog"] = "mapped_file_size_commitlog"
_KEYS["mapedFileSizeConsumeQueue"] = "mapped_file_size_consume_queue"

# Keys of RocketMQ 4.9's BrokerConfig, MessageStoreConfig, NettyServerConfig and NettyClientConfig
# (and 5.x's timer keys ferromq has no use for) that ferromq reads past (logged, never an
# error): a Java broker.conf keeps working as it is.
_ROCKETMQ_KEYS_NOT_USED = frozenset(
    """
    brokerIP2 messageStorePlugIn msgTraceTopicName traceTopicEnable
    sendMessageThreadPoolNums putMessageFutureThreadPoolNums pullMessageThreadPoolNums
    processReplyMessageThreadPoolNums queryMessageThreadPoolNums adminBrokerThreadPoolNums
    clientManageThreadPoolNums consumerManageThreadPoolNums heartbeatThreadPoolNums
    endTransactionThreadPoolNums flushConsumerOffsetHistoryInterval fetchNamesrvAddrByAddressServer
    sendThreadPoolQueueCapacity putThreadPoolQueueCapacity pullThreadPoolQueueCapacity
    replyThreadPoolQueueCapacity queryThreadPoolQueueCapacity clientManagerThreadPoolQueueCapacity
    consumerManagerThreadPoolQueueCapacity heartbeatThreadPoolQueueCapacity
    endTransactionPoolQueueCapacity filterServerNums highSpeedMode commercialEnable
    commercialTimerCount commercialTransCount commercialBigCount commercialBaseCount transferMsgByHeap
    maxDelayTime registerBrokerTimeoutMills disableConsumeIfConsumerReadSlowly
    consumerFallbehindThreshold brokerFastFailureEnable waitTimeMillsInSendQueue
    waitTimeMillsInPullQueue waitTimeMillsInHeartbeatQueue waitTimeMillsInTransactionQueue
    startAcceptSendRequestTimeStamp enableCalcFilterBitMap expectConsumerNumUseFilter
    maxErrorRateOfBloomFilter filterDataCleanTimeSpan filterSupportRetry compressedRegister
    forceRegister storeReplyMessageEnable autoDeleteUnusedStats
    enableConsumeQueueExt mappedFileSizeConsumeQueueExt bitMapLengthConsumeQueueExt
    flushIntervalCommitLog commitIntervalCommitLog useReentrantLockWhenPutMessage flushCommitLogTimed
    flushIntervalConsumeQueue redeleteHangedFileInterval putMsgIndexHightWater checkCRCOnRecover
    flushCommitLogLeastPages commitCommitLogLeastPages flushLeastPagesWhenWarmMapedFile
    flushConsumeQueueLeastPages flushCommitLogThoroughInterval commitCommitLogThoroughInterval
    flushConsumeQueueThoroughInterval
    maxMsgsNumBatch messageIndexSafe warmMapedFileEnable
    debugLockEnable duplicationEnable diskFallRecorded osPageCacheBusyTimeOutMills defaultQueryMaxNum
    transientStorePoolEnable transientStorePoolSize fastFailIfNoBufferInStorePool
    enableDLegerCommitLog dLegerGroup dLegerPeers dLegerSelfId preferredLeaderId isEnableBatchPush
    enableScheduleMessageStats maxLmqConsumeQueueNum
    enableScheduleAsyncDeliver scheduleAsyncDeliverMaxPendingLimit
    userCacheMaxNum userCacheExpiredSecond userCacheRefreshSecond aclCacheMaxNum aclCacheExpiredSecond
    aclCacheRefreshSecond statefulAuthenticationCacheMaxNum statefulAuthenticationCacheExpiredSecond
    statefulAuthorizationCacheMaxNum statefulAuthorizationCacheExpiredSecond authConfigPath
    serverWorkerThreads serverCallbackExecutorThreads serverSelectorThreads serverOnewaySemaphoreValue
    serverAsyncSemaphoreValue serverSocketSndBufSize
    serverSocketRcvBufSize serverSocketBacklog writeBufferHighWaterMark writeBufferLowWaterMark
    serverPooledByteBufAllocatorEnable useEpollNativeSelector
    clientWorkerThreads clientCallbackExecutorThreads clientOnewaySemaphoreValue
    clientAsyncSemaphoreValue connectTimeoutMillis channelNotActiveInterval
    clientChannelMaxIdleTimeSeconds clientSocketSndBufSize clientSocketRcvBufSize
    clientPooledByteBufAllocatorEnable clientCloseSocketIfTimeout useTLS
    timerGetMessageThreadNum timerPutMessageThreadNum timerEnableDisruptor timerEnableCheckMetrics
    timerInterceptDelayLevel timerCheckMetricsWhen timerSkipUnknownError timerWarmEnable
    timerEnableRetryUntilSuccess timerMetricSmallThreshold timerProgressLogIntervalMs
    timerColdDataCheckIntervalMs
    """.split()
)
# Every known key by its lower case (a wrong case is the commonest slip).
_KNOWN_KEYS = {k.lower(): k for k in sorted(_KEYS.keys() | _ROCKETMQ_KEYS_NOT_USED)}


def did_you_mean(key: str) -> str | None:
    """The known RocketMQ key that `key` is most likely a misspelling of, if one is close."""
    close = difflib.get_close_matches(key.lower(), _KNOWN_KEYS, n=1, cutoff=0.8)
    return _KNOWN_KEYS[close[0]] if close else None


def _unknown_key(key: str, strict: bool) -> str:
    guess = did_you_mean(key)
    if strict:
        return f"unknown key {key!r}" + (f" (did you mean {guess!r}?)" if guess else "")
    return f"unknown key {key!r} ignored" + (f"; did you mean {guess!r}?" if guess else "")


def _convert(name: str, raw: str) -> Any:
    """The field's value from its text; ValueError says what the key must be."""
    ftype = {f.name: f.type for f in dataclasses.fields(BrokerConfig)}[name]
    value = raw.strip()
    if name == "flush_disk_type":
        try:
            return FlushDiskType(value.upper())
        except ValueError:
            raise ValueError(f"must be ASYNC_FLUSH or SYNC_FLUSH, not {raw!r}") from None
    if "bool" in str(ftype):
        low = value.lower()
        if low not in ("true", "false"):
            raise ValueError(f"must be true or false, not {raw!r}")
        return low == "true"
    if "int" in str(ftype):
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"must be an integer, not {raw!r}") from None
    return value


def _read_conf(path: str | os.PathLike[str]) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {os.fspath(path)} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {os.fspath(path)} is a directory") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file {os.fspath(path)}: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {os.fspath(path)} is not UTF-8 text ({e.reason})") from e


def load_broker_config(
    path: str | os.PathLike[str] | None = None,
    *,
    profile: str = "rocketmq",
    strict: bool = False,
    **overrides: Any,
) -> BrokerConfig:
    """Reads broker.conf (if given) over the `profile`'s values, then applies overrides (field
    names; None means "not given"). Every problem is reported at once, with its line. Keys RocketMQ
    has but ferromq does not use are logged; other keys are logged as unknown, or, with `strict`,
    are errors too."""
    if profile not in PROFILES:
        raise ConfigError(f"profile must be one of {', '.join(PROFILES)}, not {profile!r}")
    values: dict[str, Any] = dict(PROFILES[profile])
    lines: dict[str, int] = {}
    problems: list[tuple[float, str]] = []  # (line, text); problems of overrides come last
    any_unknown = False
    if path is not None:
        for no, key, raw in parse_properties(_read_conf(path)):
            name = _KEYS.get(key)
            if name is None:
                if key in _ROCKETMQ_KEYS_NOT_USED:
                    logger.info("%s:%d: %s is not used by ferromq; ignored", path, no, key)
                elif strict:
                    problems.append((no, f"{path}:{no}: {_unknown_key(key, strict)}"))
                    any_unknown = True
                else:
                    logger.warning("%s:%d: %s", path, no, _unknown_key(key, strict))
                continue
            try:
                values[name] = _convert(name, raw)
                lines[name] = no
            except ValueError as e:
                problems.append((no, f"{path}:{no}: {key} {e}"))
    for name, value in overrides.items():
        if value is not None:
            values[name] = value
            lines.pop(name, None)
    cfg = BrokerConfig(profile=profile, **values)
    for name, text in cfg.problems():
        if name in lines:
            problems.append((lines[name], f"{path}:{lines[name]}: {text}"))
        else:
            problems.append((math.inf, text))
    if any_unknown:
        problems.append((math.inf, "unknown keys are errors with --strict-config"))
    if problems:
        raise ConfigError("; ".join(text for _, text in sorted(problems, key=lambda p: p[0])))
    return cfg


# -- UPDATE_BROKER_CONFIG / GET_BROKER_CONFIG ------------------------------------------------------

# Fields that hold secrets (`setting(secret=True)`): GET_BROKER_CONFIG never lists them (Java lists
# every field).
SECRET_FIELDS = flagged(BrokerConfig, "secret")

# RocketMQ key -> field, one key per field (no old spellings): what GET_BROKER_CONFIG lists.
BROKER_CONFIG_KEYS: Mapping[str, str] = MappingProxyType(
    dict(sorted((k, n) for n, k in KEY_OF.items() if n not in SECRET_FIELDS))
)

# Fields the broker reads from its config on every request (`setting(runtime=True)`), so
# UPDATE_BROKER_CONFIG can change them while it runs; the others are taken once at start (store,
# ports, paths, services).
RUNTIME_FIELDS = flagged(BrokerConfig, "runtime")
RUNTIME_KEYS = frozenset(KEY_OF[n] for n in RUNTIME_FIELDS)


def java_config_value(value: Any) -> str | None:
    """A field's value as Java's Properties text holds it (None: no value, not listed)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, FlushDiskType):
        return value.value
    return str(value)


def runtime_changes(text: str) -> dict[str, Any]:
    """The field changes an UPDATE_BROKER_CONFIG body (Java properties) asks for. Keys of RocketMQ's
    that ferromq has no use for are logged and skipped, as in broker.conf; a key that can only be set
    at start, an unknown key or a bad value raises `ConfigError` naming every problem."""
    changes: dict[str, Any] = {}
    problems: list[str] = []
    for _line, key, raw in parse_properties(text):
        name = _KEYS.get(key)
        if name is None:
            if key in _ROCKETMQ_KEYS_NOT_USED:
                logger.warning(
                    "UPDATE_BROKER_CONFIG: %s is a RocketMQ key ferromq does not use; ignored", key
                )
                continue
            hint = did_you_mean(key)
            problems.append(f"unknown key {key}" + (f" (did you mean {hint}?)" if hint else ""))
            continue
        if name not in RUNTIME_FIELDS:
            problems.append(
                f"{key} cannot change while the broker runs (set it in broker.conf and restart); "
                f"keys that can: {', '.join(sorted(RUNTIME_KEYS))}"
            )
            continue
        try:
            changes[name] = _convert(name, raw)
        except ValueError as e:
            problems.append(f"{key} {e}")
    if problems:
        raise ConfigError("; ".join(problems))
    return changes
