"""What most of the broker's parts read of it, said once: its settings, and its store with the
topic, group and offset tables. Each part's own Protocol adds what else it uses."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ferromq.broker.config import BrokerConfig
    from ferromq.broker.offsets import ConsumerOffsetManager
    from ferromq.broker.subscriptions import SubscriptionGroupManager
    from ferromq.broker.topics import TopicConfigManager
    from ferromq.store import MessageStore


class HasConfig(Protocol):
    @property
    def config(self) -> BrokerConfig: ...


class BrokerState(HasConfig, Protocol):
    @property
    def store(self) -> MessageStore: ...
    @property
    def topics(self) -> TopicConfigManager: ...
    @property
    def groups(self) -> SubscriptionGroupManager: ...
    @property
    def offsets(self) -> ConsumerOffsetManager: ...
