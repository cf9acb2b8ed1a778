"""The broker daemon."""

from ferromq.broker.broker import Broker
from ferromq.broker.config import BrokerConfig, load_broker_config

__all__ = ["Broker", "BrokerConfig", "load_broker_config"]
