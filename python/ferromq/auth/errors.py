"""ACL 2.0's refusals. A remoting request refused is answered NO_PERMISSION (16) with the text
alone, as Java 5.3.3's broker does (its auth pipelines abort with the exception's message); a gRPC
call refused is UNAUTHORIZED with the same text."""

from __future__ import annotations

from ferromq.errors import NoPermissionError


class AuthenticationError(NoPermissionError):
    """The caller is not who it says (no user, unknown or disabled user, wrong signature)."""


class AuthorizationError(NoPermissionError):
    """The caller may not do what it asks, or an ACL to store is not valid."""
