"""Pure parts of controller mode: where a replica's CommitLog stops agreeing with a new master's
(epochs), the epoch file, and controller.conf errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferromq.broker.config import ConfigError
from ferromq.broker.epochs import EpochEntry, EpochFile, consistent_point
from ferromq.controller.config import load_controller_config

E = EpochEntry


@pytest.mark.parametrize(
    ("local", "local_end", "remote", "remote_end", "point"),
    [
        # Same history: nothing to cut.
        ([E(1, 0)], 500, [E(1, 0)], 500, 500),
        # A slave behind the master: keeps all it has.
        ([E(1, 0)], 300, [E(1, 0), E(2, 500)], 900, 300),
        # The old master wrote past where the new master's epoch begins: cut there.
        ([E(1, 0)], 800, [E(1, 0), E(2, 500)], 900, 500),
        # Master again later, with an epoch the group never saw: back to the common epoch's end.
        ([E(1, 0), E(3, 700)], 800, [E(1, 0), E(2, 500), E(4, 600)], 900, 500),
        # A replica that got some of epoch 2 before its master died.
        ([E(1, 0), E(2, 500)], 650, [E(1, 0), E(2, 500), E(3, 700)], 900, 650),
        # The same epoch number that began elsewhere is not common.
        ([E(1, 0), E(2, 400)], 450, [E(1, 0), E(2, 500)], 900, 400),
    ],
)
def test_consistent_point(
    local: list[EpochEntry], local_end: int, remote: list[EpochEntry], remote_end: int, point: int
) -> None:
    assert consistent_point(local, local_end, remote, remote_end) == point


def test_no_common_epoch() -> None:
    assert consistent_point([E(5, 0)], 100, [E(1, 0)], 100) is None
    assert consistent_point([], 0, [E(1, 0)], 100) is None


def test_epoch_file_survives_reopen_and_drops_epochs_without_data(tmp_path: Path) -> None:
    f = EpochFile(tmp_path)
    f.replace([E(1, 0), E(2, 500), E(3, 900)])
    f.begin(4, 700)  # this replica has data up to 700: epoch 3 (from 900) is not its
    again = EpochFile(tmp_path)
    assert again.entries == [E(1, 0), E(2, 500), E(4, 700)]
    assert again.last_epoch == 4


def test_controller_config_errors(tmp_path: Path) -> None:
    conf = tmp_path / "controller.conf"
    conf.write_text("controllerDLegerPeers = n0-127.0.0.1:1;n1-nohost\ncontrollerDLegerSelfId = n9\n")
    with pytest.raises(ConfigError) as e:
        load_controller_config(conf)
    assert "controller.conf:1: controllerDLegerPeers 'n1-nohost' is not id-host:port" in str(e.value)
    conf.write_text("controllerDLegerPeers = n0-127.0.0.1:1;n1-127.0.0.1:2\ncontrollerDLegerSelfId = n9\n")
    with pytest.raises(ConfigError, match="controllerDLegerSelfId 'n9' is not one of n0, n1"):
        load_controller_config(conf)
    conf.write_text("controllerDLegerPeers = n0-127.0.0.1:1;n1-127.0.0.1:2\ncontrollerDLegerSelfId = n1\n")
    cfg = load_controller_config(conf)
    assert cfg.self_raft_addr == "127.0.0.1:2"
    assert cfg.other_raft_addrs == ["127.0.0.1:1"]


def test_a_master_restarting_in_its_epoch_keeps_its_start(tmp_path: Path) -> None:
    f = EpochFile(tmp_path)
    f.replace([E(1, 0), E(2, 500)])
    f.begin(2, 900)
    assert f.entries == [E(1, 0), E(2, 500)]
