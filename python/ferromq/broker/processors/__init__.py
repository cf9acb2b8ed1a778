"""Request processors, one module per family. `build_registry` maps request codes to handlers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferromq.broker.processors import (
    acl,
    admin,
    auth_admin,
    broker_config,
    broker_status,
    client_manage,
    consumer_control,
    consumer_manage,
    end_transaction,
    lite_admin,
    lite_consume,
    pop,
    pull,
    query,
    recall,
    retention,
    send,
)
from ferromq.remoting.dispatch import Handler

if TYPE_CHECKING:
    from ferromq.broker.processors.context import ProcessorsContext


def build_registry(broker: ProcessorsContext) -> dict[int, Handler]:
    registry: dict[int, Handler] = {}
    for module in (
        send,
        pull,
        consumer_manage,
        client_manage,
        query,
        admin,
        lite_admin,
        lite_consume,
        broker_status,
        broker_config,
        consumer_control,
        end_transaction,
        retention,
        recall,
        pop,
        acl,
        auth_admin,
    ):
        registry.update(module.handlers(broker))
    return registry
