"""The broker's configuration at run time: GET_BROKER_CONFIG lists every key as Java's Properties
text (secrets left out), UPDATE_BROKER_CONFIG changes the keys the broker reads on every request
(`ferromq.broker.config.RUNTIME_KEYS`; the others are refused by name)."""

from __future__ import annotations

import logging

from ferromq.broker.config import BROKER_CONFIG_KEYS, ConfigError, java_config_value
from ferromq.broker.processors.context import BrokerConfigContext, ContextHandler, bind
from ferromq.errors import BrokerError
from ferromq.jsonutil import dumps_sorted
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.headers import GetBrokerConfigResponseHeader
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Handler

logger = logging.getLogger(__name__)


async def get_config(ctx: BrokerConfigContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    cfg = ctx.config
    lines = []
    for key, field_name in BROKER_CONFIG_KEYS.items():
        value = java_config_value(getattr(cfg, field_name))
        if value is not None:
            lines.append(f"{key}={value}\n")
    version = dumps_sorted({"counter": ctx.config_version, "timestamp": ctx.config_timestamp})
    return cmd.reply(
        ResponseCode.SUCCESS,
        body="".join(lines).encode(),
        ext=GetBrokerConfigResponseHeader(version=version.decode()).to_ext(),
    )


async def update_config(ctx: BrokerConfigContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    text = (cmd.body or b"").decode("utf-8", "replace")
    try:
        changed = ctx.update_config(text)
    except ConfigError as e:
        raise BrokerError(str(e), ResponseCode.SYSTEM_ERROR) from None
    logger.info("broker config updated by %s: %s", conn.peer, ", ".join(sorted(changed)) or "no change")
    return cmd.reply(ResponseCode.SUCCESS)


HANDLERS: dict[int, ContextHandler[BrokerConfigContext]] = {
    RequestCode.GET_BROKER_CONFIG: get_config,
    RequestCode.UPDATE_BROKER_CONFIG: update_config,
}


def handlers(ctx: BrokerConfigContext) -> dict[int, Handler]:
    return bind(ctx, HANDLERS)
