"""How `ferromq admin` prints: rich tables for people, JSON (`--json`) for scripts; local times;
the usage error (exit code 2)."""

from __future__ import annotations

import argparse
import base64
import dataclasses
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

import orjson
from rich import box
from rich.console import Console
from rich.table import Table

from ferromq.client import Admin
from ferromq.client.message import ReceivedMessage

Command = Callable[[Admin, argparse.Namespace], Awaitable[Any]]


class UsageError(ValueError):
    """An argument the command cannot use (exit code 2)."""


def _console() -> Console:
    # Piped output keeps whole rows (no wrapping at 80 columns); a terminal uses its width.
    return Console(width=None if sys.stdout.isatty() else 200, highlight=False)


def make_table(*columns: str, title: str | None = None, right: Sequence[str] = ()) -> Table:
    t = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False, show_edge=False)
    for c in columns:
        t.add_column(c, justify="right" if c in right else "left", overflow="fold")
    return t


def local_time(ts: int) -> str:
    """A store time (ms) as local time; `-` for 0."""
    if ts <= 0:
        return "-"
    return datetime.fromtimestamp(ts / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _body_json(body: bytes) -> dict[str, str]:
    try:
        return {"body": body.decode("utf-8"), "bodyEncoding": "utf-8"}
    except UnicodeDecodeError:
        return {"body": base64.b64encode(body).decode(), "bodyEncoding": "base64"}


def jsonable(obj: Any) -> Any:
    """Results as JSON-ready data: dataclasses by field (camelCase keys), bytes as text."""
    if isinstance(obj, ReceivedMessage):
        out = {
            _camel(f.name): jsonable(getattr(obj, f.name))
            for f in dataclasses.fields(obj)
            if f.name != "body"
        }
        return {**out, **_body_json(obj.body)}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {_camel(f.name): jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set):
        return [jsonable(v) for v in obj]
    if isinstance(obj, bytes):
        return _body_json(obj)["body"]
    return obj


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.capitalize() for p in rest)


def print_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(jsonable(data), option=orjson.OPT_INDENT_2).decode() + "\n")


class Output:
    """Where a command's result goes: a rich table for people, JSON for scripts."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.console = _console()

    def result(self, data: Any, *renderables: Any) -> None:
        if self.as_json:
            print_json(data)
        else:
            for r in renderables:
                self.console.print(r)

    def names(self, names: list[str]) -> None:
        """A plain list: one name a line (easy to pipe), or a JSON array."""
        if self.as_json:
            print_json(names)
        else:
            sys.stdout.write("".join(f"{n}\n" for n in names))
