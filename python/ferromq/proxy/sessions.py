"""The 5.x clients the gRPC front knows, by client id (`x-mq-client-id`): the Settings each sent
over Telemetry, merged with the broker's as Apache RocketMQ's proxy merges them
(GrpcClientSettingsManager), and the Telemetry stream the broker reaches the client by (a
transaction's check goes there as a RecoverOrphanedTransactionCommand).

A session is the `ClientConnection` the broker's client manager keeps for a 5.x producer or
consumer, as it keeps a remoting connection for a 4.x client."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from google.protobuf import duration_pb2

from ferromq import _store
from ferromq.broker.subscriptions import SubscriptionGroupConfig
from ferromq.message import decode_messages
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.proxy.convert import to_v2
from ferromq.proxy.proto.apache.rocketmq.v2 import definition_pb2 as pb
from ferromq.proxy.proto.apache.rocketmq.v2 import service_pb2 as spb

logger = logging.getLogger(__name__)

# What the proxy tells producers (ProxyConfig defaults).
PRODUCER_MAX_ATTEMPTS = 3
PRODUCER_BACKOFF_INITIAL_MS = 10
PRODUCER_BACKOFF_MAX_MS = 1000
MAX_BODY_SIZE = 4 * 1024 * 1024
# ... and consumers.
RECEIVE_BATCH_SIZE = 32
LONG_POLLING_TIMEOUT_MS = 20_000
# Commands queued for a client whose stream is gone are dropped past this many.
MAX_QUEUED_COMMANDS = 1024
# Transactions a client may leave open (sent, not ended) before the oldest are forgotten (a check
# tells the broker where their half messages are again).
MAX_OPEN_TRANSACTIONS = 10_000
# A client heard from by no call for this long is gone (5.x clients heartbeat every 10 s).
IDLE_SESSION_SECONDS = 120.0
PRUNE_EVERY_SECONDS = 30.0


def _duration(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


# The retry policies of a group that names none (CustomizedRetryPolicy's and ExponentialRetryPolicy's
# defaults in 5.3.3): how long a push consumer's message waits before its attempt n + 1.
DEFAULT_RETRY_STEPS_MS = tuple(
    s * 1000 for s in (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
)
DEFAULT_EXPONENTIAL = {"initial": 5000, "max": 7_200_000, "multiplier": 2}


def _retry_policy(cfg: SubscriptionGroupConfig) -> pb.RetryPolicy:
    """The group's `groupRetryPolicy` as the proxy gives it to a consumer (GrpcClientSettingsManager):
    exponential or customized (the default), with the defaults of the one it names when it gives
    none, and the group's retryMaxTimes + 1 attempts."""
    policy = cfg.group_retry_policy or {}
    attempts = cfg.retry_max_times + 1
    if policy.get("type") == "EXPONENTIAL":
        given = policy.get("exponentialRetryPolicy") or {}
        exp = {k: int(given.get(k, default)) for k, default in DEFAULT_EXPONENTIAL.items()}
        return pb.RetryPolicy(
            max_attempts=attempts,
            exponential_backoff=pb.ExponentialBackoff(
                initial=_duration(exp["initial"]), max=_duration(exp["max"]), multiplier=exp["multiplier"]
            ),
        )
    given = policy.get("customizedRetryPolicy") or {}
    steps = given.get("next") or DEFAULT_RETRY_STEPS_MS
    return pb.RetryPolicy(
        max_attempts=attempts,
        customized_backoff=pb.CustomizedBackoff(next=[_duration(int(ms)) for ms in steps]),
    )


def merged_settings(client: pb.Settings, group: SubscriptionGroupConfig | None) -> pb.Settings:
    """The Settings a client gets back: its own, with the broker's limits for a producer, and its
    group's consumption rules (FIFO, batch, long polling, retry policy) for a consumer."""
    out = pb.Settings()
    out.CopyFrom(client)
    if client.HasField("publishing"):
        out.backoff_policy.CopyFrom(
            pb.RetryPolicy(
                max_attempts=PRODUCER_MAX_ATTEMPTS,
                exponential_backoff=pb.ExponentialBackoff(
                    initial=_duration(PRODUCER_BACKOFF_INITIAL_MS),
                    max=_duration(PRODUCER_BACKOFF_MAX_MS),
                    multiplier=2,
                ),
            )
        )
        out.publishing.validate_message_type = True
        out.publishing.max_body_size = MAX_BODY_SIZE
    elif client.HasField("subscription"):
        cfg = group if group is not None else SubscriptionGroupConfig(client.subscription.group.name)
        sub = out.subscription
        sub.receive_batch_size = RECEIVE_BATCH_SIZE
        sub.long_polling_timeout.CopyFrom(_duration(LONG_POLLING_TIMEOUT_MS))
        sub.fifo = cfg.consume_message_orderly
        # RocketMQ 5.5's (GrpcClientSettingsManager.mergeSubscriptionData): how many lite topics one
        # client may subscribe, how long a lite topic's name may be; a lite client needs both.
        sub.lite_subscription_quota = cfg.lite_sub_client_quota
        sub.max_lite_topic_size = _store.MAX_LITE_TOPIC_BYTES
        out.backoff_policy.CopyFrom(_retry_policy(cfg))
    return out


class Session:
    """One 5.x client: its settings and the Telemetry stream the broker writes commands to."""

    def __init__(self, client_id: str, peer: str, language: str, version: str) -> None:
        self.client_id_ = client_id
        self.peer_ = peer
        self.language = language
        self.version = version
        self.settings: pb.Settings | None = None
        self._commands: asyncio.Queue[spb.TelemetryCommand] = asyncio.Queue()
        self._closed = False
        self._on_close: list[Callable[[Any], None]] = []
        self.transactions: dict[str, tuple[int, int, str]] = {}
        """transaction id -> (half message's queue offset, CommitLog offset, the broker it is on: where
        EndTransaction goes in cluster mode), as sends and checks learn them (EndTransaction names
        only the transaction); see `remember_transaction`."""
        self.last_seen = time.monotonic()

    def remember_transaction(self, transaction_id: str, where: tuple[int, int, str]) -> None:
        """Where a transaction's half message is, bounded: the oldest open ones go first."""
        self.transactions[transaction_id] = where
        while len(self.transactions) > MAX_OPEN_TRANSACTIONS:
            del self.transactions[next(iter(self.transactions))]

    # -- what the broker's client manager needs of a connection (ClientConnection) -------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def peer(self) -> str:
        return self.peer_

    @property
    def client_id(self) -> str | None:
        return self.client_id_

    def on_close(self, callback: Callable[[Any], None]) -> None:
        self._on_close.append(callback)

    async def oneway(self, cmd: RemotingCommand) -> None:
        """A request of the broker to the client: a transaction's check goes over Telemetry;
        others (consumer id changes) mean nothing to a 5.x client."""
        if cmd.code == RequestCode.CHECK_TRANSACTION_STATE:
            self.check_transaction(cmd, "")

    def check_transaction(self, cmd: RemotingCommand, broker_name: str) -> None:
        """A broker's CHECK_TRANSACTION_STATE (from `broker_name`; "" for the broker the proxy runs
        in) to the client, as a RecoverOrphanedTransactionCommand."""
        messages = decode_messages(cmd.body)
        if not messages:
            return
        m = messages[0]
        transaction_id = cmd.ext.get("transactionId") or m.uniq_key or ""
        queue_offset = int(cmd.ext.get("tranStateTableOffset", "-1"))
        commit_log_offset = int(cmd.ext.get("commitLogOffset", "-1"))
        self.remember_transaction(transaction_id, (queue_offset, commit_log_offset, broker_name))
        command = spb.TelemetryCommand(
            recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                message=to_v2(cmd.body), transaction_id=transaction_id
            )
        )
        self.send(command)

    async def request(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        return cmd.reply(
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark="a 5.x client answers no remoting requests"
        )

    # -- the Telemetry stream ---------------------------------------------------------------------

    def send(self, command: spb.TelemetryCommand) -> None:
        if self._commands.qsize() < MAX_QUEUED_COMMANDS:
            self._commands.put_nowait(command)

    async def next_command(self) -> spb.TelemetryCommand:
        return await self._commands.get()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for callback in self._on_close:
            try:
                callback(self)
            except Exception:
                logger.exception("closing the session of %s", self.client_id_)


class Sessions:
    """Every 5.x client by client id."""

    def __init__(self) -> None:
        self.by_id: dict[str, Session] = {}
        self._pruned = time.monotonic()

    def get(self, client_id: str) -> Session | None:
        return self.by_id.get(client_id)

    def open(self, client_id: str, peer: str, language: str, version: str) -> Session:
        """The client's session (a new one for a client not known), heard from now."""
        now = time.monotonic()
        if now - self._pruned > PRUNE_EVERY_SECONDS:
            self._pruned = now
            for gone in [c for c, s in self.by_id.items() if now - s.last_seen > IDLE_SESSION_SECONDS]:
                self.remove(gone)
        session = self.by_id.get(client_id)
        if session is None or session.closed:
            session = self.by_id[client_id] = Session(client_id, peer, language, version)
        session.last_seen = now
        return session

    def remove(self, client_id: str) -> Session | None:
        session = self.by_id.pop(client_id, None)
        if session is not None:
            session.close()
        return session
