"""The store's defaults are Rust's (crates/store/src/config.rs `StoreConfig::new`, exported as
`_store.STORE_DEFAULTS`); the binding's signature, `ferromq.store.StoreConfig` and the broker's
configuration repeat them, and must say the same."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path
from typing import Any

import pytest

from ferromq import _store
from ferromq.broker.config import BrokerConfig
from ferromq.store import StoreConfig

# What the broker sets for itself: its store directory and its address.
BROKER_OWN = {"commitlog_dir", "store_host"}


def python_defaults() -> dict[str, Any]:
    fields = {f.name: f.default for f in dataclasses.fields(StoreConfig)}
    del fields["root"]
    return {k: str(v) if k == "flush_disk_type" else v for k, v in fields.items()}


def test_rust_exports_every_argument_of_the_store() -> None:
    names = [p for p in inspect.signature(_store.Store).parameters if p != "root"]
    assert sorted(names) == sorted(_store.STORE_DEFAULTS)


def test_the_bindings_signature_is_rusts() -> None:
    signature = inspect.signature(_store.Store)
    defaults = {name: p.default for name, p in signature.parameters.items() if name != "root"}
    # PyO3 shows `...` for a default that is not a literal: the hot window's is Rust's constant
    # itself (`Some(DEFAULT_MAPPED_FILE_HOT_WINDOW)`), so there is nothing to compare.
    assert {name for name, value in defaults.items() if value is Ellipsis} == {"mapped_file_hot_window"}
    shown = {name: value for name, value in defaults.items() if value is not Ellipsis}
    assert shown == {name: value for name, value in _store.STORE_DEFAULTS.items() if name in shown}


def test_the_stub_is_rusts() -> None:
    stub = ast.parse((Path(_store.__file__).parent / "_store.pyi").read_text(encoding="utf-8"))
    store = next(n for n in stub.body if isinstance(n, ast.ClassDef) and n.name == "Store")
    new = next(n for n in store.body if isinstance(n, ast.FunctionDef) and n.name == "__new__")
    arguments = new.args.kwonlyargs
    defaults = {a.arg: ast.literal_eval(d) for a, d in zip(arguments, new.args.kw_defaults, strict=True) if d}
    # `...` where the runtime shows `...` (stubtest checks that the two agree).
    assert {name for name, value in defaults.items() if value is Ellipsis} == {"mapped_file_hot_window"}
    shown = {name: value for name, value in defaults.items() if value is not Ellipsis}
    assert shown == {name: value for name, value in _store.STORE_DEFAULTS.items() if name in shown}
    assert set(defaults) == set(_store.STORE_DEFAULTS)


def test_pythons_store_config_is_rusts() -> None:
    assert python_defaults() == _store.STORE_DEFAULTS


@pytest.mark.parametrize("name", sorted(set(_store.STORE_DEFAULTS) - BROKER_OWN))
def test_the_brokers_default_is_rusts(name: str) -> None:
    # The broker's `rocketmq` profile keeps Apache RocketMQ's defaults, which the store's are.
    broker = BrokerConfig().store_config()
    value = getattr(broker, name)
    assert (str(value) if name == "flush_disk_type" else value) == _store.STORE_DEFAULTS[name], name
