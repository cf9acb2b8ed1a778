"""The controller's replicated state: per broker group, its replicas, master, epoch and
SyncStateSet. Every change goes through the Raft log (PySyncObj `@replicated` methods) and is
decided by checks on the state alone (compare-and-set on epochs), so every node applies the same
change or the same refusal. Liveness is not here: each controller node sees heartbeats itself."""

from __future__ import annotations

import copy
import threading
from typing import Any

from pysyncobj import SyncObjConsumer, replicated

from ferromq.controller.codes import NO_MASTER


def new_group(cluster: str) -> dict[str, Any]:
    return {
        "cluster": cluster,
        "brokers": {},  # broker address -> {"id": int, "haAddr": str}
        "nextId": 1,
        "masterId": NO_MASTER,
        "epoch": 0,
        "syncStateSet": [],
        "syncStateSetEpoch": 0,
    }


class GroupTable(SyncObjConsumer):
    """Broker groups by name. Methods marked `@replicated` run on every node in log order; call
    them with `callback=` (their return value arrives there) from any node."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.groups: dict[str, dict[str, Any]] = {}

    def _serialize(self) -> dict[str, Any]:
        with self._lock:
            return {"groups": copy.deepcopy(self.groups)}

    def _deserialize(self, data: dict[str, Any]) -> None:
        with self._lock:
            self.groups = data.get("groups", {})

    def snapshot(self, name: str) -> dict[str, Any] | None:
        """A copy of one group's state (read on this node: a follower may be a little behind)."""
        with self._lock:
            group = self.groups.get(name)
            return copy.deepcopy(group) if group is not None else None

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self.groups)

    @replicated
    def register(self, cluster: str, name: str, addr: str, ha_addr: str) -> dict[str, Any]:
        """A replica of `name` at `addr` (its request port) joins or comes back: its broker id
        (the same address keeps its id) and the group."""
        with self._lock:
            group = self.groups.setdefault(name, new_group(cluster))
            broker = group["brokers"].get(addr)
            if broker is None:
                broker = group["brokers"][addr] = {"id": group["nextId"], "haAddr": ha_addr}
                group["nextId"] += 1
            broker["haAddr"] = ha_addr
            return {"ok": True, "brokerId": broker["id"], "group": copy.deepcopy(group)}

    @replicated
    def elect(self, name: str, master_id: int, expected_epoch: int) -> dict[str, Any]:
        """Makes `master_id` the master (NO_MASTER: none) in a new epoch, if the group is still at
        `expected_epoch`. A new master's SyncStateSet is itself; it adds replicas as they catch up.
        Without a master the set stays, so only its members can be elected later."""
        with self._lock:
            group = self.groups.get(name)
            if group is None:
                return {"ok": False, "error": f"broker group {name} is unknown"}
            if group["epoch"] != expected_epoch:
                return {"ok": False, "error": f"epoch is {group['epoch']}, not {expected_epoch}"}
            ids = {b["id"] for b in group["brokers"].values()}
            if master_id != NO_MASTER and master_id not in ids:
                return {"ok": False, "error": f"broker id {master_id} is not a replica of {name}"}
            group["masterId"] = master_id
            group["epoch"] += 1
            if master_id != NO_MASTER:
                group["syncStateSet"] = [master_id]
                group["syncStateSetEpoch"] += 1
            return {"ok": True, "group": copy.deepcopy(group)}

    @replicated
    def alter_sync_state_set(
        self, name: str, master_id: int, master_epoch: int, members: list[int], set_epoch: int
    ) -> dict[str, Any]:
        """The master's new SyncStateSet, accepted only from the current master at the current
        epochs (a deposed master's change is refused: that is what fences it)."""
        with self._lock:
            group = self.groups.get(name)
            if group is None:
                return {"ok": False, "error": f"broker group {name} is unknown"}
            if group["masterId"] != master_id or group["epoch"] != master_epoch:
                return {
                    "ok": False,
                    "error": f"broker {master_id} at epoch {master_epoch} is not the master "
                    f"(master {group['masterId']}, epoch {group['epoch']})",
                }
            if group["syncStateSetEpoch"] != set_epoch:
                return {
                    "ok": False,
                    "error": f"SyncStateSet epoch is {group['syncStateSetEpoch']}, not {set_epoch}",
                }
            ids = {b["id"] for b in group["brokers"].values()}
            if master_id not in members or not set(members) <= ids:
                return {
                    "ok": False,
                    "error": f"SyncStateSet {members} must hold the master and only replicas",
                }
            group["syncStateSet"] = sorted(set(members))
            group["syncStateSetEpoch"] += 1
            return {"ok": True, "group": copy.deepcopy(group)}
