"""What the gRPC MessagingService (`ferromq.proxy.service`) asks of "the broker", as one small
interface with two implementations, as Apache RocketMQ's proxy has a local and a cluster mode:

* `ferromq.proxy.local.LocalBackend`: the broker the proxy runs in, called in process (local mode);
* `ferromq.proxy.cluster.ClusterBackend`: the brokers a name server lists, over remoting (cluster
  mode).

The service keeps every gRPC-level rule (validation, conversion, queue choice, status mapping); a
backend only stores, pops, acks and looks things up. The values it answers with are in
`ferromq.proxy.results`, which the conversions import too (so neither imports this module)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ferromq import _store
    from ferromq.acl.plain import PlainAcl
    from ferromq.auth.evaluator import Auth
    from ferromq.broker.clients import Subscription
    from ferromq.broker.config import BrokerConfig
    from ferromq.broker.pop.formats import ExtraInfo
    from ferromq.broker.pop.service import PopRequest
    from ferromq.broker.subscriptions import SubscriptionGroupConfig
    from ferromq.protocol.headers import EndTransactionRequestHeader, SendMessageRequestHeader
    from ferromq.proxy.results import BrokerQueues, Popped, SendOutcome
    from ferromq.proxy.sessions import Session


LiteNotifier = Callable[[str, str, str], None]
"""(client id, group, lite topic): a broker dropped the client's subscription of the lite topic."""


class Backend(Protocol):
    @property
    def config(self) -> BrokerConfig:
        """Settings the front reads (delay levels, invisible and renewal times, TLS, its address):
        the broker's own in local mode, defaults with the proxy's in cluster mode."""
        ...

    @property
    def reserved_topics(self) -> frozenset[str]:
        """Topics a client may not name beside every broker's system topics: in local mode the
        broker's own (its cluster, its name, its reply topic), as Java's proxy refuses them when
        its broker runs in the same process; none in cluster mode."""
        ...

    @property
    def acl(self) -> PlainAcl | None: ...
    @property
    def auth(self) -> Auth | None:
        """ACL 2.0 over the gRPC port, when on."""
        ...

    @property
    def data_plane(self) -> _store.DataPlane | None:
        """The data plane whose sends the gRPC front serves itself (local mode, on the broker's
        port's plane); None: every call reaches the service."""
        ...

    async def queues(self, topic: str) -> list[BrokerQueues] | None:
        """The topic's queues on each broker (None: no broker has the topic)."""
        ...

    async def message_type(self, topic: str) -> str:
        """The topic's message.type (UNSPECIFIED for a topic no broker has)."""
        ...

    async def group(self, group: str) -> SubscriptionGroupConfig | None: ...

    async def send(
        self, session: Session, broker_name: str, h: SendMessageRequestHeader, body: bytes
    ) -> SendOutcome:
        """Stores one message on `broker_name` (raises for a send the broker refuses outright)."""
        ...

    async def pop(self, broker_name: str, req: PopRequest) -> Popped:
        """A pop on `broker_name` (any broker of the topic when it has none), long polling."""
        ...

    async def pop_lite(
        self,
        broker_name: str,
        client_id: str,
        group: str,
        topic: str,
        max_msgs: int,
        invisible_ms: int,
        poll_ms: int,
        attempt_id: str | None,
    ) -> Popped:
        """A lite consumer's pop (POP_LITE_MESSAGE) on `broker_name`, long polling."""
        ...

    async def sync_lite(self, entry: dict[str, Any], notify: LiteNotifier) -> None:
        """A lite subscription change (a LiteSubscriptionDTO) to every broker of its topic; `notify`
        tells a client a broker dropped one of its lite topics."""
        ...

    async def ack(
        self, group: str, topic: str, receipt: ExtraInfo, lite_topic: str | None = None
    ) -> None: ...

    async def change_invisible(
        self,
        group: str,
        topic: str,
        receipt: ExtraInfo,
        invisible_ms: int,
        lite_topic: str | None = None,
        suspend: bool = False,
    ) -> tuple[int, int, int]:
        """(popTime, invisibleTime, reviveQid) of the new checkpoint (of a lite message: of its
        order state; `suspend` holds its whole lite topic)."""
        ...

    async def dead_letter(self, group: str, receipt: ExtraInfo, commit_log_offset: int) -> None:
        """The message at `commit_log_offset` of the receipt's broker to the group's dead letter queue."""
        ...

    async def end_transaction(
        self, session: Session, broker_name: str, h: EndTransactionRequestHeader
    ) -> None:
        """Commits or rolls back the half message `h` names on `broker_name`."""
        ...

    async def recall(self, session: Session, topic: str, handle: str) -> str:
        """Recalls a delay message; its message id."""
        ...

    async def register_producer(self, session: Session, topics: list[str]) -> None: ...

    async def register_consumer(
        self, session: Session, group: str, data: dict[str, str], subscriptions: list[Subscription]
    ) -> None: ...

    async def unregister(self, session: Session, topics: list[str], group: str | None) -> None: ...
