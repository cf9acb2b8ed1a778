"""How a config table declares a field once: its default, its RocketMQ key and its range.

A config table is a frozen dataclass of one concern (the broker's store, its TLS, its table topics,
...). Each field is `name: type = setting(default, ...)`: the key is the camelCase of the name
unless `key=` spells it otherwise (RocketMQ's `brokerIP1`, `tls.server.mode`), `least`/`most`
bound a number (`most=JAVA_INT_MAX` for what is a Java int in RocketMQ) and `percent` makes it
0-100, `runtime` lets it change while the owner runs and `secret` keeps it from being listed.
`keys_of`, `flagged` and `range_problems` read those declarations back; nothing else repeats them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

JAVA_INT_MAX = 2**31 - 1
JAVA_LONG_MAX = 2**63 - 1


def setting(
    default: Any = dataclasses.MISSING,
    *,
    factory: Callable[[], Any] | None = None,
    key: str | None = None,
    least: int | None = None,
    most: int | None = None,
    percent: bool = False,
    runtime: bool = False,
    secret: bool = False,
) -> Any:
    """A config table's field: its default (or `factory`), and where not derived from the name,
    its key; `least`/`most` (numbers; `most` defaults to a Java long's maximum once `least` is
    given), `percent` (0-100); `runtime`: the owner reads it on every use, so it may change while
    it runs; `secret`: never listed back (a password, a secret key)."""
    metadata = {
        "key": key,
        "least": least,
        "most": most,
        "percent": percent,
        "runtime": runtime,
        "secret": secret,
    }
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def key_of(f: dataclasses.Field[Any]) -> str:
    """A field's key: the one its `setting` spells, else the camelCase of its name."""
    return f.metadata.get("key") or camel(f.name)


def keys_of(table: type) -> dict[str, str]:
    """Field -> key of every `setting` field of a config table (or of a class composed of them)."""
    return {f.name: key_of(f) for f in dataclasses.fields(table) if "key" in f.metadata}


def flagged(table: type, flag: str) -> frozenset[str]:
    """The fields of a config table whose `setting` sets `flag` ("runtime", "secret")."""
    return frozenset(f.name for f in dataclasses.fields(table) if f.metadata.get(flag))


def range_problems(values: Any, fields: Sequence[dataclasses.Field[Any]]) -> list[tuple[str, str]]:
    """Every number of `fields` out of its declared range, as (field, message naming the key)."""
    out: list[tuple[str, str]] = []

    def bad(f: dataclasses.Field[Any], must: str) -> None:
        out.append((f.name, f"{key_of(f)} must be {must}, not {getattr(values, f.name)!r}"))

    for f in fields:
        least, most = f.metadata.get("least"), f.metadata.get("most")
        if least is None:
            continue
        most = JAVA_LONG_MAX if most is None else most
        if getattr(values, f.name) < least:
            bad(f, f">= {least}" if least != 1 else "> 0")
        elif getattr(values, f.name) > most:
            bad(f, f"<= {most}")
    for f in fields:
        if f.metadata.get("percent") and not 0 <= getattr(values, f.name) <= 100:
            bad(f, "a percentage (0-100)")
    return out
