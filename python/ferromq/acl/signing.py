"""Request signatures as RocketMQ 4.x clients make them (`AclClientRPCHook`, `AclUtils`).

The signed content is the request's ext field values, in the order of their keys, joined without a
separator and encoded as UTF-8, followed by the body. The signature is HmacSHA1 of that content
keyed with the account's secret key, in base64. No asyncio, no sockets: the broker and the Python
client both use it.
"""

from __future__ import annotations

import binascii
import functools
import hashlib
import hmac
import operator
from collections.abc import Callable

from ferromq.protocol.constants import UNIQUE_KEY_QUERY

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
# MixAll.UNIQUE_MSG_QUERY_FLAG: the broker leaves it out of the content it checks (a client does not).
UNIQUE_MSG_QUERY_FLAG = UNIQUE_KEY_QUERY

_SERVER_SKIPPED = frozenset((SIGNATURE, UNIQUE_MSG_QUERY_FLAG))
_BLOCK = 64  # SHA-1's block size


def field_text(ext: dict[str, str], skipped: frozenset[str] = frozenset((SIGNATURE,))) -> bytes:
    """The ext values in key order, without the `skipped` keys, as UTF-8."""
    return "".join(_in_key_order(tuple(ext), skipped)(ext)).encode("utf-8")


@functools.lru_cache(maxsize=1024)
def _in_key_order(
    keys: tuple[str, ...], skipped: frozenset[str]
) -> Callable[[dict[str, str]], tuple[str, ...]]:
    """A getter of the values in key order, per set of keys (a client sends the same header
    fields in the same order every time: the sort is done once)."""
    ordered = sorted(k for k in keys if k not in skipped)
    if len(ordered) > 1:
        return operator.itemgetter(*ordered)
    return lambda ext: tuple(ext[k] for k in ordered)


class Signer:
    """HmacSHA1 keyed with one secret. The inner and outer hash states of the key are computed
    once; a signature copies them (RFC 2104), which is cheaper than `hmac.new` per request."""

    __slots__ = ("_inner", "_outer")

    def __init__(self, secret_key: str) -> None:
        key = secret_key.encode("utf-8")
        if len(key) > _BLOCK:
            key = hashlib.sha1(key).digest()
        key = key.ljust(_BLOCK, b"\0")
        self._inner = hashlib.sha1(bytes(b ^ 0x36 for b in key))
        self._outer = hashlib.sha1(bytes(b ^ 0x5C for b in key))

    def sign(self, *parts: bytes) -> str:
        inner = self._inner.copy()
        for part in parts:
            inner.update(part)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return binascii.b2a_base64(outer.digest(), newline=False).decode("ascii")

    def server_signature(self, ext: dict[str, str], body: bytes) -> str:
        """The signature a broker expects for a request (Signature and the unique-key query flag
        left out, as `PlainAccessValidator.parse` does). `sign` written out: this runs for every
        request a broker with aclEnable=true takes."""
        inner = self._inner.copy()
        inner.update("".join(_in_key_order(tuple(ext), _SERVER_SKIPPED)(ext)).encode("utf-8"))
        inner.update(body)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return binascii.b2a_base64(outer.digest(), newline=False).decode("ascii")


class Credentials:
    """An account's keys on the client side: `apply` signs a request as Java's
    `AclClientRPCHook.doBeforeRequest` does (AccessKey, and SecurityToken when there is one, are
    added first and signed too; the signature covers every other field and the body)."""

    __slots__ = ("_signer", "access_key", "security_token")

    def __init__(self, access_key: str, secret_key: str, security_token: str | None = None) -> None:
        if not access_key or not secret_key:
            raise ValueError("an access key and a secret key are both needed")
        self.access_key = access_key
        self.security_token = security_token
        self._signer = Signer(secret_key)

    def signed(self, ext: dict[str, str], body: bytes) -> bool:
        """Whether a request carries these credentials' AccessKey and signature (the server's
        check of a key it shares with its peers, e.g. a controller's of its brokers)."""
        given = ext.get(SIGNATURE)
        if ext.get(ACCESS_KEY) != self.access_key or given is None:
            return False
        expected = self._signer.server_signature(ext, body)
        return hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace"))

    def apply(self, ext: dict[str, str], body: bytes) -> None:
        ext.pop(SIGNATURE, None)
        ext[ACCESS_KEY] = self.access_key
        if self.security_token is not None:
            ext[SECURITY_TOKEN] = self.security_token
        ext[SIGNATURE] = self._signer.sign(field_text(ext), body)


def credentials_of(access_key: str | None, secret_key: str | None) -> Credentials | None:
    """The clients' `access_key` / `secret_key` options: both or neither."""
    if access_key is None and secret_key is None:
        return None
    if not access_key or not secret_key:
        raise ValueError("access_key and secret_key go together: give both or neither")
    return Credentials(access_key, secret_key)
