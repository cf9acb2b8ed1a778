"""The ACL's error: a refused request is answered SYSTEM_ERROR with Java's remark."""

from __future__ import annotations

from ferromq.errors import BrokerError
from ferromq.protocol.codes import ResponseCode

# Java answers an exception thrown by a server RPC hook with SYSTEM_ERROR and
# `RemotingHelper.exceptionSimpleDesc`: the exception's toString, then its top stack frame.
_EXCEPTION = "org.apache.rocketmq.acl.common.AclException"
_MANAGER = "org.apache.rocketmq.acl.plain.PlainPermissionManager"


class AclError(BrokerError):
    """A request the ACL refuses, or an ACL setting it cannot use (the message says why)."""

    code = ResponseCode.SYSTEM_ERROR


def refusal(message: str, where: str) -> AclError:
    """The refusal Java's broker gives, `where` being the method and line of
    PlainPermissionManager.java (4.9.7) that throws it, e.g. "validate:667"."""
    method, _, line = where.partition(":")
    return AclError(f"{_EXCEPTION}: {message}, {_MANAGER}.{method}(PlainPermissionManager.java:{line})")
