"""SQL92 message filters, with RocketMQ's grammar: comparisons (=, <>, >, >=, <, <=), BETWEEN,
IN, IS [NOT] NULL, AND, OR, NOT, parentheses, string ('…'), integer and decimal literals, TRUE,
FALSE, NULL. Identifiers name message properties.

An expression compiles once into a predicate over a properties dict. Logic is three-valued as in
SQL: a comparison with a missing property is unknown, and only a true result matches. Property
values are text; compared with a number they are read as numbers (a value that is not a number
does not match), as RocketMQ does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

from ferromq.errors import SubscriptionParseError

Value = str | int | float | bool | None
Expr = Callable[[dict[str, str]], Value]

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<str>'(?:[^']|'')*')
      | (?P<num>-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)
      | (?P<op><>|!=|>=|<=|=|>|<|\(|\)|,)
      | (?P<word>[A-Za-z_$][\w.$-]*)
    )""",
    re.VERBOSE,
)
_KEYWORDS = {"AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE"}


def _tokens(text: str) -> list[tuple[str, str]]:
    out, at = [], 0
    text = text.rstrip()
    while at < len(text):
        m = _TOKEN.match(text, at)
        if m is None or m.end() == at:
            raise SubscriptionParseError(f"SQL92 expression: unexpected {text[at : at + 12]!r} at {at}")
        kind = m.lastgroup or ""
        value = m.group(kind)
        if kind == "word" and value.upper() in _KEYWORDS:
            kind, value = "kw", value.upper()
        out.append((kind, value))
        at = m.end()
    return out


def _number(v: Value) -> int | float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int | float):
        return v
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return None


def _compare(op: str, a: Value, b: Value) -> bool | None:
    if a is None or b is None:
        return None
    if isinstance(a, bool) or isinstance(b, bool):
        a2 = (
            a
            if isinstance(a, bool)
            else str(a).lower() == "true"
            if str(a).lower() in ("true", "false")
            else None
        )
        b2 = (
            b
            if isinstance(b, bool)
            else str(b).lower() == "true"
            if str(b).lower() in ("true", "false")
            else None
        )
        if a2 is None or b2 is None or op not in ("=", "<>"):
            return False
        return (a2 == b2) == (op == "=")
    if isinstance(a, str) and isinstance(b, str):
        x: str | int | float = a
        y: str | int | float = b
    else:
        na, nb = _number(a), _number(b)
        if na is None or nb is None:
            return False
        x, y = na, nb
    if op == "=":
        return x == y
    if op == "<>":
        return x != y
    if isinstance(x, str) != isinstance(y, str):
        return False
    if op == ">":
        return x > y  # type: ignore[operator]
    if op == ">=":
        return x >= y  # type: ignore[operator]
    if op == "<":
        return x < y  # type: ignore[operator]
    return x <= y  # type: ignore[operator]


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.at = 0

    def peek(self, value: str | None = None, kind: str | None = None) -> bool:
        if self.at >= len(self.toks):
            return False
        k, v = self.toks[self.at]
        return (value is None or v == value) and (kind is None or k == kind)

    def take(self, value: str | None = None, kind: str | None = None) -> str:
        if not self.peek(value, kind):
            got = self.toks[self.at][1] if self.at < len(self.toks) else "end of expression"
            raise SubscriptionParseError(f"SQL92 expression: expected {value or kind}, found {got!r}")
        self.at += 1
        return self.toks[self.at - 1][1]

    def parse(self) -> Expr:
        expr = self.or_()
        if self.at != len(self.toks):
            raise SubscriptionParseError(f"SQL92 expression: unexpected {self.toks[self.at][1]!r}")
        return expr

    def or_(self) -> Expr:
        left = self.and_()
        while self.peek("OR", "kw"):
            self.take()
            right = self.and_()
            left = _or(left, right)
        return left

    def and_(self) -> Expr:
        left = self.not_()
        while self.peek("AND", "kw"):
            self.take()
            right = self.not_()
            left = _and(left, right)
        return left

    def not_(self) -> Expr:
        if self.peek("NOT", "kw"):
            self.take()
            inner = self.not_()
            return lambda p: None if (v := _truth(inner(p))) is None else not v
        return self.predicate()

    def predicate(self) -> Expr:
        if self.peek("(", "op"):
            self.take()
            inner = self.or_()
            self.take(")")
            return inner
        left = self.value()
        negate = False
        if (
            self.peek("NOT", "kw")
            and self.at + 1 < len(self.toks)
            and self.toks[self.at + 1][1] in ("BETWEEN", "IN")
        ):
            self.take()
            negate = True
        if self.peek(kind="op") and self.toks[self.at][1] in ("=", "<>", "!=", ">", ">=", "<", "<="):
            op = self.take()
            op = "<>" if op == "!=" else op
            right = self.value()
            return lambda p: _compare(op, left(p), right(p))
        if self.peek("BETWEEN", "kw"):
            self.take()
            lo = self.value()
            self.take("AND")
            hi = self.value()

            def between(p: dict[str, str]) -> Value:
                v = left(p)
                res = _and3(_compare(">=", v, lo(p)), _compare("<=", v, hi(p)))
                return None if res is None else res != negate

            return between
        if self.peek("IN", "kw"):
            self.take()
            self.take("(")
            items = [self.literal()]
            while self.peek(",", "op"):
                self.take()
                items.append(self.literal())
            self.take(")")

            def in_(p: dict[str, str]) -> Value:
                v = left(p)
                if v is None:
                    return None
                return any(_compare("=", v, i) for i in items) != negate

            return in_
        if self.peek("IS", "kw"):
            self.take()
            is_not = self.peek("NOT", "kw")
            if is_not:
                self.take()
            self.take("NULL")
            return lambda p: (left(p) is None) != is_not
        return left  # a bare value: TRUE, FALSE or a property holding "true"

    def literal(self) -> Value:
        kind, raw = self.toks[self.at] if self.at < len(self.toks) else ("", "")
        if kind in ("str", "num") or (kind == "kw" and raw in ("TRUE", "FALSE", "NULL")):
            self.at += 1
            return _literal(kind, raw)
        raise SubscriptionParseError(
            f"SQL92 expression: expected a literal, found {raw or 'end of expression'!r}"
        )

    def value(self) -> Expr:
        if self.peek(kind="word"):
            name = self.take()
            return lambda p: p.get(name)
        lit = self.literal()
        return lambda p: lit


def _literal(kind: str, raw: str) -> Value:
    if kind == "str":
        return raw[1:-1].replace("''", "'")
    if kind == "num":
        return float(raw) if any(c in raw for c in ".eE") else int(raw)
    return {"TRUE": True, "FALSE": False, "NULL": None}[raw]


def _truth(v: Value) -> bool | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return v
    return str(v).lower() == "true"


def _and3(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


def _and(left: Expr, right: Expr) -> Expr:
    return lambda p: _and3(_truth(left(p)), _truth(right(p)))


def _or(left: Expr, right: Expr) -> Expr:
    def f(p: dict[str, str]) -> Value:
        a, b = _truth(left(p)), _truth(right(p))
        if a or b:
            return True
        if a is None or b is None:
            return None
        return False

    return f


@lru_cache(maxsize=1024)
def compile_sql92(text: str) -> Callable[[dict[str, str]], bool]:
    """A predicate over message properties; raises SubscriptionParseError for a bad expression.
    Compiled once per distinct expression (cached)."""
    if not text or not text.strip():
        raise SubscriptionParseError("SQL92 expression is empty")
    expr = _Parser(text).parse()
    return lambda props: _truth(expr(props)) is True
