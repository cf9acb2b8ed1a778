"""SQL92 filter expressions: grammar, three-valued logic, numbers held as text."""

from __future__ import annotations

import pytest

from ferromq.broker.sql92 import compile_sql92
from ferromq.errors import SubscriptionParseError

PROPS = {"a": "5", "b": "hello", "price": "12.5", "flag": "true", "TAGS": "TagA", "region": "EU"}


@pytest.mark.parametrize(
    ("expr", "matches"),
    [
        ("a = 5", True),
        ("a = '5'", True),
        ("a > 3 AND a < 10", True),
        ("a >= 6", False),
        ("a <> 5", False),
        ("a != 4", True),
        ("a BETWEEN 1 AND 5", True),
        ("a NOT BETWEEN 1 AND 5", False),
        ("price > 12.4", True),
        ("b = 'hello'", True),
        ("b = 'it''s'", False),
        ("b > 3", False),  # text that is not a number never compares with a number
        ("region IN ('EU', 'US')", True),
        ("region NOT IN ('EU', 'US')", False),
        ("TAGS = 'TagA' OR missing = 1", True),
        ("missing = 1", False),
        ("NOT missing = 1", False),  # unknown stays unknown
        ("missing IS NULL", True),
        ("a IS NOT NULL", True),
        ("missing IS NOT NULL AND a = 5", False),
        ("flag = TRUE", True),
        ("flag", True),
        ("TRUE", True),
        ("FALSE OR (a = 5 AND b = 'hello')", True),
        ("not (a = 5)", False),
        ("a = 5 and (b = 'x' or region = 'EU')", True),
    ],
)
def test_expressions(expr: str, matches: bool) -> None:
    assert compile_sql92(expr)(PROPS) is matches


@pytest.mark.parametrize(
    "bad", ["", "a =", "a = = 1", "(a = 1", "a IN ()", "a BETWEEN 1", "a = 1 b", "a ~ 1", "'x"]
)
def test_bad_expressions_are_parse_errors(bad: str) -> None:
    with pytest.raises(SubscriptionParseError) as e:
        compile_sql92(bad)
    assert e.value.code == 23


def test_compiled_once() -> None:
    assert compile_sql92("a > 1") is compile_sql92("a > 1")
