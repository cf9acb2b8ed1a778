"""Broker configuration, read from a RocketMQ `broker.conf` (Java properties with RocketMQ's keys).

The names callers use, from the modules that hold them: `config_fields` (`BrokerConfig`, made of
one config table per concern, with its profiles, checks and each field's key), its table-topic
table `ferromq.tables.config`, and `config_keys` (parsing broker.conf and UPDATE_BROKER_CONFIG
bodies over those fields), with `ConfigError` (from `ferromq.errors`) and `parse_properties` (from
`ferromq.properties`), which the controller reads its file with too. `config_keys` imports
`config_fields`, never the reverse, and neither imports this module."""

from __future__ import annotations

from ferromq.broker.config_fields import (
    DATA_PLANES,
    KEY_OF,
    METRICS_EXPORTER_TYPES,
    PROFILES,
    TABLE_TOPIC_CODECS,
    TABLE_TOPIC_ROLES,
    TABLE_TOPICS_REGEX,
    BrokerConfig,
    StoreMismatchError,
    timer_precision,
)
from ferromq.broker.config_keys import (
    BROKER_CONFIG_KEYS,
    RUNTIME_FIELDS,
    RUNTIME_KEYS,
    SECRET_FIELDS,
    did_you_mean,
    java_config_value,
    load_broker_config,
    runtime_changes,
)
from ferromq.errors import ConfigError
from ferromq.properties import parse_properties

__all__ = [
    "BROKER_CONFIG_KEYS",
    "DATA_PLANES",
    "KEY_OF",
    "METRICS_EXPORTER_TYPES",
    "PROFILES",
    "RUNTIME_FIELDS",
    "RUNTIME_KEYS",
    "SECRET_FIELDS",
    "TABLE_TOPICS_REGEX",
    "TABLE_TOPIC_CODECS",
    "TABLE_TOPIC_ROLES",
    "BrokerConfig",
    "ConfigError",
    "StoreMismatchError",
    "did_you_mean",
    "java_config_value",
    "load_broker_config",
    "parse_properties",
    "runtime_changes",
    "timer_precision",
]
