"""ACL 2.0's admin requests (AUTH_CREATE_USER 3001 ... AUTH_LIST_ACL 3010), as Apache RocketMQ
5.3.3's AdminBrokerProcessor answers them: the request headers name the user (`username`) or the
subject (`subject`, `User:<name>`), the bodies are `UserInfo` and `AclInfo` JSON, a refusal of the
users and ACLs themselves is NO_PERMISSION with Java's text.

Only a Super user may create, update or delete a Super user. Who may call these at all is the
authorization's business (Cluster Update or Get, by the request table in `ferromq.auth.contexts`).
A slave answers them as a master does: Java 5.3.3 makes no slave check for these codes (unlike its
topic and group updates).
With ACL 2.0 off (no `authenticationEnabled`) there are no users to manage: answered as Java 5.3.3
answers without its metadata providers: the checks made before the provider is touched keep their
answers, then SYSTEM_ERROR "An system error occurred, please try again later.", except getAcl and
listAcl, whose IllegalStateException reaches Java's remoting layer (the exception and its top frame).
"""

from __future__ import annotations

from typing import Any

import orjson

from ferromq.acl.signing import ACCESS_KEY
from ferromq.auth.errors import AuthenticationError, AuthorizationError
from ferromq.auth.metadata import AuthMetadata
from ferromq.auth.model import Acl, PolicyType, Resource, User, UserType
from ferromq.broker.processors.context import AuthAdminContext, ContextHandler, bind
from ferromq.errors import BrokerError
from ferromq.protocol.codes import RequestCode, ResponseCode
from ferromq.protocol.command import RemotingCommand
from ferromq.remoting.connection import Connection
from ferromq.remoting.dispatch import Handler

# Java's handleAuthException for anything but an authentication or authorization refusal.
SYSTEM_TEXT = "An system error occurred, please try again later."
# What Java 5.3.3's remoting layer answers when getAcl/listAcl find no metadata provider
# (UtilAll.exceptionSimpleDesc: the exception, then its top stack frame).
_NO_PROVIDER = (
    "java.lang.IllegalStateException: The authenticationMetadataProvider is not configured., "
    "org.apache.rocketmq.auth.authorization.manager.AuthorizationMetadataManagerImpl.{0}"
    "(AuthorizationMetadataManagerImpl.java:{1})"
)
# AdminBrokerProcessor throws "The body of acl is null" outside its future: the remoting layer's text.
_NO_ACL_BODY = (
    "org.apache.rocketmq.auth.authorization.exception.AuthorizationException: The body of acl is null, "
    "org.apache.rocketmq.broker.processor.AdminBrokerProcessor.{0}(AdminBrokerProcessor.java:{1})"
)


# Java makes the answer as a SYSTEM_ERROR with this remark and on success only sets the code: every
# successful answer of these ten codes carries it.
UNSET_REMARK = "not set any response code"


def _ok(cmd: RemotingCommand, body: bytes = b"") -> RemotingCommand:
    return cmd.reply(ResponseCode.SUCCESS, UNSET_REMARK, body=body)


def _metadata(ctx: AuthAdminContext) -> AuthMetadata:
    """The users and ACLs; with ACL 2.0 off, Java's answer once it reaches for its missing provider."""
    if ctx.auth is None:
        raise BrokerError(SYSTEM_TEXT, ResponseCode.SYSTEM_ERROR)
    return ctx.auth.metadata


def _json(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


# AdminBrokerProcessor decodes UserInfo and sets its username: with no body, a NullPointerException
# that reaches the remoting layer (its JDK 17 text, as 5.3.3 runs here, and the frame).
_NO_USER_BODY = (
    'java.lang.NullPointerException: Cannot invoke "org.apache.rocketmq.remoting.protocol.body.UserInfo'
    '.setUsername(String)" because "userInfo" is null, '
    "org.apache.rocketmq.broker.processor.AdminBrokerProcessor.{0}(AdminBrokerProcessor.java:{1})"
)


def _user_of(cmd: RemotingCommand) -> User:
    """The UserInfo body named by the header's username, checked in Java's order."""
    name = _username(cmd)
    try:
        data = orjson.loads(cmd.body) if cmd.body else None
    except orjson.JSONDecodeError:
        raise BrokerError("The body of user is not JSON", ResponseCode.SYSTEM_ERROR) from None
    if data is None:
        site = ("createUser", 3014) if cmd.code == RequestCode.AUTH_CREATE_USER else ("updateUser", 3046)
        raise BrokerError(_NO_USER_BODY.format(*site), ResponseCode.SYSTEM_ERROR)
    if not isinstance(data, dict):
        raise BrokerError("The body of user is not a JSON object", ResponseCode.SYSTEM_ERROR)
    return User.from_info(data, name)


def _refused(e: AuthenticationError | AuthorizationError) -> BrokerError:
    return BrokerError(str(e), ResponseCode.NO_PERMISSION)


def _not_super_caller(metadata: AuthMetadata, cmd: RemotingCommand) -> bool:
    """Whether the caller names a user that is not Super (no AccessKey: authentication is off)."""
    caller = cmd.ext.get(ACCESS_KEY)
    if not caller:
        return False
    user = metadata.users.get(caller)
    return user is None or not user.is_super


def _username(cmd: RemotingCommand) -> str:
    name = cmd.ext.get("username") or ""
    if not name:
        raise BrokerError("The username is blank", ResponseCode.INVALID_PARAMETER)
    return name


async def create_user(ctx: AuthAdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    user = _user_of(cmd)
    if ctx.auth is None and not (user.password or "").strip():
        raise _refused(AuthenticationError("password can not be blank"))
    metadata = _metadata(ctx)
    if user.user_type is UserType.SUPER and _not_super_caller(metadata, cmd):
        raise BrokerError("The super user can only be create by super user", ResponseCode.SYSTEM_ERROR)
    try:
        metadata.create_user(user)
    except AuthenticationError as e:
        raise _refused(e) from None
    return _ok(cmd)


async def update_user(ctx: AuthAdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    user = _user_of(cmd)
    metadata = _metadata(ctx)
    if user.user_type is UserType.SUPER and _not_super_caller(metadata, cmd):
        raise BrokerError("The super user can only be update by super user", ResponseCode.SYSTEM_ERROR)
    try:
        old = metadata.users.get(user.username)
        if old is None:
            raise AuthenticationError("The user is not exist")
        if old.is_super and _not_super_caller(metadata, cmd):
            raise AuthenticationError("The super user can only be update by super user")
        metadata.update_user(user)
    except AuthenticationError as e:
        raise _refused(e) from None
    return _ok(cmd)


async def delete_user(ctx: AuthAdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    name = cmd.ext.get("username") or ""
    if ctx.auth is None and not name.strip():
        raise _refused(AuthenticationError("username can not be blank"))
    metadata = _metadata(ctx)
    try:
        old = metadata.get_user(name)
        if old is not None:
            if old.is_super and _not_super_caller(metadata, cmd):
                raise AuthenticationError("The super user can only be update by super user")
            metadata.delete_user(name)
    except AuthenticationError as e:
        raise _refused(e) from None
    return _ok(cmd)


async def get_user(ctx: AuthAdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    name = (cmd.ext.get("username") or "").strip()
    if not name:
        raise BrokerError("The username is blank", ResponseCode.INVALID_PARAMETER)
    metadata = _metadata(ctx)
    user = metadata.users.get(name)
    return _ok(cmd, _json(user.as_info()) if user is not None else b"")


async def list_users(ctx: AuthAdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    users = _metadata(ctx).list_users(cmd.ext.get("filter"))
    return _ok(cmd, _json([u.as_info() for u in users]) if users else b"")


def _acl_of(cmd: RemotingCommand) -> Acl:
    try:
        body = orjson.loads(cmd.body) if cmd.body else None
    except orjson.JSONDecodeError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("policies"), list) or not body["policies"]:
        site = ("createAcl", 3158) if cmd.code == RequestCode.AUTH_CREATE_ACL else ("updateAcl", 3185)
        raise BrokerError(_NO_ACL_BODY.format(*site), ResponseCode.SYSTEM_ERROR)
    try:
        return Acl.from_info(body, cmd.ext.get("subject"))
    except AuthorizationError as e:
        raise _refused(e) from None


async def put_acl(ctx: AuthAdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    """AUTH_CREATE_ACL and AUTH_UPDATE_ACL alike: the entries merged into the subject's ACL."""
    acl = _acl_of(cmd)
    metadata = _metadata(ctx)
    try:
        metadata.put_acl(acl)
    except AuthorizationError as e:
        raise _refused(e) from None
    return _ok(cmd)


async def delete_acl(ctx: AuthAdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    policy_type = PolicyType.by_name(cmd.ext.get("policyType"))
    resource = Resource.parse(cmd.ext.get("resource"))
    if ctx.auth is None and not (cmd.ext.get("subject") or "").strip():
        raise _refused(AuthorizationError("The subject is null."))
    metadata = _metadata(ctx)
    try:
        metadata.delete_acl(cmd.ext.get("subject"), policy_type, resource)
    except (AuthenticationError, AuthorizationError) as e:
        raise _refused(e) from None
    return _ok(cmd)


async def get_acl(ctx: AuthAdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    if ctx.auth is None:
        raise BrokerError(
            _NO_PROVIDER.format("getAuthenticationMetadataProvider", 273), ResponseCode.SYSTEM_ERROR
        )
    metadata = ctx.auth.metadata
    try:
        acl = metadata.get_acl(cmd.ext.get("subject") or "")
    except AuthorizationError as e:
        raise _refused(e) from None
    return _ok(cmd, _json(acl.as_info()) if acl is not None else b"")


async def list_acls(ctx: AuthAdminContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    if ctx.auth is None:
        raise BrokerError(
            _NO_PROVIDER.format("getAuthorizationMetadataProvider", 280), ResponseCode.SYSTEM_ERROR
        )
    acls = ctx.auth.metadata.list_acls(cmd.ext.get("subjectFilter"), cmd.ext.get("resourceFilter"))
    return _ok(cmd, _json([a.as_info() for a in acls]) if acls else b"")


HANDLERS: dict[int, ContextHandler[AuthAdminContext]] = {
    RequestCode.AUTH_CREATE_USER: create_user,
    RequestCode.AUTH_UPDATE_USER: update_user,
    RequestCode.AUTH_DELETE_USER: delete_user,
    RequestCode.AUTH_GET_USER: get_user,
    RequestCode.AUTH_LIST_USER: list_users,
    RequestCode.AUTH_CREATE_ACL: put_acl,
    RequestCode.AUTH_UPDATE_ACL: put_acl,
    RequestCode.AUTH_DELETE_ACL: delete_acl,
    RequestCode.AUTH_GET_ACL: get_acl,
    RequestCode.AUTH_LIST_ACL: list_acls,
}


def handlers(ctx: AuthAdminContext) -> dict[int, Handler]:
    return bind(ctx, HANDLERS)
