"""What each request processor (and the metrics exporter) may use of the broker: one protocol
per module listing exactly the managers and callbacks it touches. POP's service and the HA service
declare theirs beside them (`PopContext` in broker/pop/service.py, `ReplicationContext` in
broker/replication.py), so they do not import this module, which names them. The broker object
is passed (it satisfies them all; its config is replaced at run time, so a processor reads it
through the broker rather than from a copy), typed as the narrow protocol, so a processor cannot
reach further without the type check saying so.

Handlers are top-level functions `handler(ctx, conn, cmd)`; `bind` gives the dispatcher their
`(conn, cmd)` form for one context."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import TYPE_CHECKING, Protocol, TypeVar

from ferromq.broker.pop.service import PopContext
from ferromq.broker.state import BrokerState, HasConfig
from ferromq.protocol.command import RemotingCommand
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Handler

if TYPE_CHECKING:
    from ferromq import _store
    from ferromq.acl.plain import PlainAcl
    from ferromq.auth.evaluator import Auth
    from ferromq.broker.clients import ClientManager
    from ferromq.broker.lite_consumers import LiteConsumers
    from ferromq.broker.locks import RebalanceLockManager
    from ferromq.broker.long_polling import PullRequestHoldService
    from ferromq.broker.offsets import ConsumerOffsetManager
    from ferromq.broker.pop.modes import RequestModeManager
    from ferromq.broker.pop.service import PopService
    from ferromq.broker.registration import NameServerRegistration
    from ferromq.broker.replication import ReplicationService
    from ferromq.broker.schedule import ScheduleMessageService
    from ferromq.broker.stats import BrokerStats
    from ferromq.broker.subscriptions import SubscriptionGroupManager
    from ferromq.broker.topics import TopicConfigManager
    from ferromq.broker.transaction import TransactionalMessageService
    from ferromq.store import MessageStore
    from ferromq.tables.tiering import TieringStatus
    from ferromq.tiered.service import TieredService

C = TypeVar("C", contravariant=True)
ContextHandler = Callable[[C, Connection, RemotingCommand], Awaitable[RemotingCommand | None]]


def bind(ctx: C, table: Mapping[int, ContextHandler[C]]) -> dict[int, Handler]:
    """The handlers of `table`, each given `ctx`."""
    return {code: functools.partial(handler, ctx) for code, handler in table.items()}


class SendContext(HasConfig, Protocol):
    """SEND_MESSAGE(_V2), SEND_BATCH_MESSAGE, CONSUMER_SEND_MSG_BACK."""

    @property
    def store(self) -> MessageStore: ...
    @property
    def topics(self) -> TopicConfigManager: ...
    @property
    def groups(self) -> SubscriptionGroupManager: ...
    @property
    def clients(self) -> ClientManager: ...
    @property
    def stats(self) -> BrokerStats: ...
    @property
    def replication(self) -> ReplicationService: ...
    @property
    def sender(self) -> _store.Sender: ...
    def registration_changed(self) -> None: ...
    def message_arrived(self, topic: str, queue_id: int, next_offset: int, tags_code: int | None) -> None: ...


class HasTiered(Protocol):
    """Tiered storage, None when tieredStorageLevel=DISABLE (or on a slave)."""

    @property
    def tiered(self) -> TieredService | None: ...


class PullContext(BrokerState, HasTiered, Protocol):
    """PULL_MESSAGE and its long-polling hold."""

    @property
    def clients(self) -> ClientManager: ...
    @property
    def stats(self) -> BrokerStats: ...
    @property
    def hold(self) -> PullRequestHoldService: ...


class ConsumerManageContext(Protocol):
    """GET_CONSUMER_LIST_BY_GROUP, QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET."""

    @property
    def store(self) -> MessageStore: ...
    @property
    def clients(self) -> ClientManager: ...
    @property
    def offsets(self) -> ConsumerOffsetManager: ...


class ClientManageContext(HasConfig, Protocol):
    """HEART_BEAT, UNREGISTER_CLIENT, CHECK_CLIENT_CONFIG."""

    @property
    def topics(self) -> TopicConfigManager: ...
    @property
    def groups(self) -> SubscriptionGroupManager: ...
    @property
    def clients(self) -> ClientManager: ...
    def registration_changed(self) -> None: ...


class QueryContext(HasConfig, HasTiered, Protocol):
    """QUERY_MESSAGE, VIEW_MESSAGE_BY_ID."""

    @property
    def store(self) -> MessageStore: ...


class EndTransactionContext(HasConfig, Protocol):
    @property
    def transactions(self) -> TransactionalMessageService: ...


class RecallContext(HasConfig, Protocol):
    @property
    def topics(self) -> TopicConfigManager: ...
    @property
    def store(self) -> MessageStore: ...
    def message_arrived(self, topic: str, queue_id: int, next_offset: int, tags_code: int | None) -> None: ...


class PopHandlersContext(PopContext, Protocol):
    @property
    def pop(self) -> PopService: ...
    @property
    def lite_consumers(self) -> LiteConsumers: ...
    @property
    def request_modes(self) -> RequestModeManager: ...
    @property
    def clients(self) -> ClientManager: ...
    @property
    def registration(self) -> NameServerRegistration: ...


class RetentionContext(Protocol):
    @property
    def store(self) -> MessageStore: ...


class AclContext(HasConfig, Protocol):
    @property
    def acl(self) -> PlainAcl | None: ...


class AuthAdminContext(HasConfig, Protocol):
    """ACL 2.0's users and ACLs (auth_admin.py)."""

    @property
    def auth(self) -> Auth | None: ...


class AdminContext(BrokerState, HasTiered, Protocol):
    """Topics, offsets by time, orderly locks, subscription groups (admin.py)."""

    @property
    def locks(self) -> RebalanceLockManager: ...
    def notify_consumers(self, group: str, client_ids: Collection[str] | None = None) -> None: ...
    @property
    def stats(self) -> BrokerStats: ...
    @property
    def schedule(self) -> ScheduleMessageService: ...
    def registration_changed(self) -> None: ...


class BrokerStatusContext(BrokerState, Protocol):
    """Runtime info, topic and consume stats, connections, consume queues (broker_status.py)."""

    @property
    def clients(self) -> ClientManager: ...
    @property
    def stats(self) -> BrokerStats: ...
    @property
    def held_pulls(self) -> int: ...
    @property
    def registration_refusals(self) -> Mapping[str, str]: ...
    @property
    def tiering(self) -> TieringStatus | None: ...
    def tags_code_of(self, props: dict[str, str]) -> int: ...


class BrokerConfigContext(HasConfig, Protocol):
    """GET_BROKER_CONFIG and UPDATE_BROKER_CONFIG (broker_config.py)."""

    @property
    def config_version(self) -> int: ...
    @property
    def config_timestamp(self) -> int: ...
    def update_config(self, text: str) -> list[str]: ...


class ConsumerControlContext(HasConfig, Protocol):
    """Offset resets, cloned group offsets, calls to consumers (consumer_control.py)."""

    @property
    def store(self) -> MessageStore: ...
    @property
    def topics(self) -> TopicConfigManager: ...
    @property
    def clients(self) -> ClientManager: ...
    @property
    def offsets(self) -> ConsumerOffsetManager: ...


class ProcessorsContext(
    SendContext,
    PullContext,
    ConsumerManageContext,
    ClientManageContext,
    QueryContext,
    EndTransactionContext,
    RecallContext,
    PopHandlersContext,
    RetentionContext,
    AclContext,
    AuthAdminContext,
    AdminContext,
    BrokerStatusContext,
    BrokerConfigContext,
    ConsumerControlContext,
    Protocol,
):
    """Every processor's context at once: what `build_registry` hands all of them (the broker)."""


class MetricsContext(HasConfig, Protocol):
    """The Prometheus exporter (broker/metrics.py): what it reads when scraped."""

    @property
    def store(self) -> MessageStore: ...
    @property
    def topics(self) -> TopicConfigManager: ...
    @property
    def groups(self) -> SubscriptionGroupManager: ...
    @property
    def offsets(self) -> ConsumerOffsetManager: ...
    @property
    def clients(self) -> ClientManager: ...
    @property
    def stats(self) -> BrokerStats: ...
    @property
    def pop(self) -> PopService: ...
    @property
    def lite_consumers(self) -> LiteConsumers: ...
