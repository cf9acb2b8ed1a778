"""Request codes of the broker-controller conversation: RocketMQ 5.x's numbers (RequestCode.java),
kept here rather than in `ferromq.protocol.codes`, which mirrors the 4.x set."""

from __future__ import annotations

from enum import IntEnum

# A group's masterId when it has no master.
NO_MASTER = -1


class ControllerCode(IntEnum):
    BROKER_HEARTBEAT = 904
    CONTROLLER_ALTER_SYNC_STATE_SET = 1001
    CONTROLLER_ELECT_MASTER = 1002
    CONTROLLER_REGISTER_BROKER = 1003
    CONTROLLER_GET_REPLICA_INFO = 1004
    CONTROLLER_GET_METADATA_INFO = 1005
    GET_BROKER_EPOCH_CACHE = 1007
