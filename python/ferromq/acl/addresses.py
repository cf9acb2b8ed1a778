"""White address patterns of plain_acl.yml, matched as RocketMQ 4.9.7's `RemoteAddressStrategyFactory`.

A pattern is one of: blank (matches nothing), `*` / `*.*.*.*` / `*:*:*:*:*:*:*:*` (matches
everything), a list `a,b,c` or `192.168.1.{1,2,3}` (exact addresses), a range with `*` or `a-b` in
one position of an IPv4 address (`10.10.103.*`, `192.168.1-10.*`: that position is compared, the
ones before it must be equal, the ones after it are not looked at, as in Java), or one address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass

from ferromq.acl.errors import AclError

Matcher = Callable[[str], bool]


def _never(host: str) -> bool:
    return False


def _always(host: str) -> bool:
    return True


def _is_v4(text: str) -> bool:
    return _parses(ipaddress.IPv4Address, text)


def _is_v6(text: str) -> bool:
    return _parses(ipaddress.IPv6Address, text)


def _parses(kind: Callable[[str], object], text: str) -> bool:
    try:
        kind(text)
    except ValueError:
        return False
    return True


def _expanded_v6(text: str) -> str:
    return ipaddress.IPv6Address(text).exploded.upper()


def _canonical(address: str) -> str:
    """An address as the set of a list pattern keeps it (IPv6 written out in full)."""
    if _is_v4(address):
        return address
    if _is_v6(address):
        return _expanded_v6(address)
    raise AclError(f"Netaddress examine Exception netaddress is {address}")


@dataclass(frozen=True, slots=True)
class _OneOf:
    addresses: frozenset[str]

    def __call__(self, host: str) -> bool:
        if host in self.addresses:
            return True
        return _is_v6(host) and _expanded_v6(host) in self.addresses


@dataclass(frozen=True, slots=True)
class _Range:
    """IPv4: parts before `index` equal `head`; part `index` within [start, end]."""

    head: tuple[str, ...]
    index: int
    start: int
    end: int

    def __call__(self, host: str) -> bool:
        if not _is_v4(host):
            return False
        parts = host.split(".")
        return tuple(parts[: self.index]) == self.head and self.start <= int(parts[self.index]) <= self.end


def _range(pattern: str) -> _Range:
    if ":" in pattern:
        # Java accepts IPv6 ranges too; ferromq's peers are IPv4 (or IPv4-mapped), so it says so
        # instead of guessing at Java's string arithmetic.
        raise AclError(f"IPv6 address ranges are not supported by ferromq: {pattern}")
    parts = [p.strip() for p in pattern.split(".")]
    if len(parts) != 4:
        raise AclError(f"Netaddress examine scope Exception netaddress is {pattern}")
    for index in range(1, 4):
        value = parts[index]
        if value == "*":
            start, end = 0, 255
        elif "-" in value:
            low, _, high = value.partition("-")
            try:
                start, end = int(low), int(high)
            except ValueError:
                raise AclError(
                    f"RangeRemoteAddressStrategy netaddress examine scope Exception value {value} "
                ) from None
            if not (0 <= start <= end <= 255):
                raise AclError(
                    "RangeRemoteAddressStrategy netaddress examine scope Exception "
                    f"start is {start} , end is {end}"
                )
        else:
            continue
        head = tuple(parts[:index])
        if not all(p.isdigit() and int(p) <= 255 for p in head):
            raise AclError(f"Netaddress examine scope Exception netaddress is {pattern}")
        return _Range(head, index, start, end)
    raise AclError(f"Netaddress examine scope Exception netaddress is {pattern}")


def matcher(pattern: str | None) -> Matcher:
    """The matcher of one pattern; `AclError` (with Java's message) for a pattern Java refuses."""
    if pattern is None or not pattern.strip():
        return _never
    if pattern in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return _always
    if pattern.endswith("}"):
        prefix, brace, inner = pattern.partition("{")
        if not brace:
            raise AclError(f"MultipleRemoteAddressStrategy netaddress examine scope Exception {pattern}")
        items = [prefix + item for item in inner[:-1].split(",") if item]
        return _OneOf(frozenset(_canonical(a) for a in items))
    if "," in pattern:
        return _OneOf(frozenset(_canonical(a) for a in pattern.split(",") if a))
    if "*" in pattern or "-" in pattern:
        return _range(pattern)
    return _OneOf(frozenset((_canonical(pattern),)))
