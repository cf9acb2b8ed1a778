"""The ACL admin requests, as RocketMQ 4.9.7's AdminBrokerProcessor answers them:
UPDATE_AND_CREATE_ACL_CONFIG, DELETE_ACL_CONFIG, GET_BROKER_CLUSTER_ACL_INFO,
UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, GET_BROKER_CLUSTER_ACL_CONFIG.

Changes are written to the ACL files (with a new dataVersion) and take effect at once. With
`aclEnable=false` they are refused with a remark saying so (Java fails them without one, or
does not answer the two GET requests at all).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ferromq.acl.errors import AclError
from ferromq.acl.plain import PlainAcl
from ferromq.broker.processors.context import AclContext, ContextHandler, bind
from ferromq.errors import BrokerError
from ferromq.jsonutil import dumps
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.protocol.headers import (
    CreateAccessConfigRequestHeader,
    DeleteAccessConfigRequestHeader,
    GetBrokerAclConfigResponseHeader,
    UpdateGlobalWhiteAddrsConfigRequestHeader,
)
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Handler

T = TypeVar("T")

DISABLED = "ACL is not enabled on this broker (aclEnable=false in broker.conf)"


def _applied(failed: ResponseCode, action: Callable[[], T]) -> T:
    """`action`'s result; an ACL change that cannot be made is refused with `failed` and Java's
    message (the exception's own, without the class name)."""
    try:
        return action()
    except (AclError, OSError) as e:
        raise BrokerError(str(e), failed) from None


def _split(value: str | None) -> list[str] | None:
    """Java's UtilAll.split(value, ","): None stays None."""
    return None if value is None else value.split(",")


def _acl(ctx: AclContext, code: ResponseCode) -> PlainAcl:
    if ctx.acl is None:
        raise BrokerError(DISABLED, code)
    return ctx.acl


async def update(ctx: AclContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    failed = ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED
    plain = _acl(ctx, failed)
    h = CreateAccessConfigRequestHeader.of(cmd)
    config = {
        "accessKey": h.access_key,
        "secretKey": h.secret_key,
        "whiteRemoteAddress": h.white_remote_address,
        "defaultTopicPerm": h.default_topic_perm,
        "defaultGroupPerm": h.default_group_perm,
        "topicPerms": _split(h.topic_perms),
        "groupPerms": _split(h.group_perms),
        "admin": h.admin,
    }
    _applied(failed, lambda: plain.update_account(config))
    return cmd.reply(ResponseCode.SUCCESS)


async def delete(ctx: AclContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    failed = ResponseCode.DELETE_ACL_CONFIG_FAILED
    plain = _acl(ctx, failed)
    access_key = DeleteAccessConfigRequestHeader.of(cmd).access_key
    deleted = _applied(failed, lambda: plain.delete_account(access_key))
    if not deleted:
        raise BrokerError(
            f"The accesskey[{access_key}] corresponding to accessConfig has been deleted failed.", failed
        )
    return cmd.reply(ResponseCode.SUCCESS)


async def update_global_white(ctx: AclContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    failed = ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED
    plain = _acl(ctx, failed)
    h = UpdateGlobalWhiteAddrsConfigRequestHeader.of(cmd)
    addresses, file = h.global_white_addrs, h.acl_file_full_path
    done = _applied(failed, lambda: plain.update_global_white(addresses.split(","), file))
    if not done:
        raise BrokerError(f"The globalWhiteAddresses[{addresses}] has been updated failed.", failed)
    return cmd.reply(ResponseCode.SUCCESS)


async def versions(ctx: AclContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    plain = _acl(ctx, ResponseCode.SYSTEM_ERROR)
    cfg = ctx.config
    return cmd.reply(
        ResponseCode.SUCCESS,
        ext=GetBrokerAclConfigResponseHeader(
            version=dumps(plain.default_version().as_json()).decode(),
            all_acl_file_version=dumps(plain.versions()).decode(),
            broker_name=cfg.broker_name,
            broker_addr=cfg.broker_addr,
            cluster_name=cfg.broker_cluster_name,
        ).to_ext(),
    )


async def all_config(ctx: AclContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    plain = _acl(ctx, ResponseCode.SYSTEM_ERROR)
    body = _applied(ResponseCode.SYSTEM_ERROR, plain.all_config)
    return cmd.reply(ResponseCode.SUCCESS, body=dumps(body))


HANDLERS: dict[int, ContextHandler[AclContext]] = {
    RequestCode.UPDATE_AND_CREATE_ACL_CONFIG: update,
    RequestCode.DELETE_ACL_CONFIG: delete,
    RequestCode.GET_BROKER_CLUSTER_ACL_INFO: versions,
    RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: update_global_white,
    RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG: all_config,
}


def handlers(ctx: AclContext) -> dict[int, Handler]:
    return bind(ctx, HANDLERS)
