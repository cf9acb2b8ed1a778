"""A broker's role transitions in controller mode: what a master runs (delayed delivery, transaction
checks, the HA service that slaves connect to) and what a replica runs (the HA client following a
master, or nothing while there is none). The controller link decides when; this module is the one
place that changes the broker's role in its configuration and starts or stops the services that go
with it."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from ferromq.broker.replication import ReplicationContext, configure_replicated_topics

if TYPE_CHECKING:
    from ferromq.broker.config import BrokerConfig
    from ferromq.broker.replication import ReplicationService
    from ferromq.broker.transaction import TransactionalMessageService

logger = logging.getLogger(__name__)


class RolesContext(ReplicationContext, Protocol):
    """What role changes use of the broker: they replace its config and start or stop its
    master's services and its HA service."""

    @property
    def config(self) -> BrokerConfig: ...
    @config.setter
    def config(self, value: BrokerConfig) -> None: ...
    @property
    def replication(self) -> ReplicationService: ...
    @property
    def transactions(self) -> TransactionalMessageService: ...


class BrokerRoles:
    def __init__(self, broker: RolesContext) -> None:
        self._broker = broker

    async def start_as_replica(self) -> None:
        """Controller mode starts every broker as a replica without a master (brokerId 1) until
        the controllers decide."""
        broker = self._broker
        broker.config = broker.config.replace(broker_role="SLAVE", broker_id=1, ha_master_address=None)
        await broker.replication.start()

    async def stop_master_services(self, broker_id: int | None) -> None:
        """A replica from here on (writes refused), with no HA service or client running."""
        broker = self._broker
        broker.config = broker.config.replace(broker_role="SLAVE", broker_id=broker_id or 1)
        await broker.schedule.stop()
        await broker.transactions.stop()
        await broker.replication.stop()

    async def become_master(self, role: str, replica_id: int | None) -> None:
        """Takes writes as `role` (SYNC_MASTER or ASYNC_MASTER), the HA service listening for
        replicas. If the HA port cannot be bound, the broker is left a replica (`replica_id`)
        without services and `OSError` propagates (the controllers' next view tries again). Then
        `start_master_services`."""
        broker = self._broker
        broker.config = broker.config.replace(broker_role=role, broker_id=0, ha_master_address=None)
        try:
            await broker.replication.start()
        except OSError:
            await self.stop_master_services(replica_id)
            raise

    async def start_master_services(self) -> None:
        """Topics replicated before their configuration came are configured (the new master's
        route lists them); delayed delivery and transaction checks run."""
        broker = self._broker
        configure_replicated_topics(broker)
        await broker.schedule.start()
        await broker.transactions.start()
        broker.registration_changed()

    async def follow(self, master_ha: str | None) -> None:
        """A replica of the master at `master_ha` (None: of no master, until the controllers
        choose one): its HA client connects there."""
        broker = self._broker
        if master_ha is not None:
            broker.config = broker.config.replace(ha_master_address=master_ha)
        await broker.replication.start()
        broker.registration_changed()
