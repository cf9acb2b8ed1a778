"""The controller's Raft transport made safe (controller/raft_safety.py) and its config checks: the
restricted unpickler refuses every global but PySyncObj's own few and accepts PySyncObj's message
and snapshot shapes; the PySyncObj internals it patches are there; a real 3-node PySyncObj group
(on 127.0.0.1, with and without a password) replicates, compacts, sends a snapshot to a late node
and restarts from its files with nothing refused; a bad frame closes the connection, logged once
per host per 10 s."""

from __future__ import annotations

import gzip
import io
import logging
import os
import pickle
import socket
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pysyncobj.journal
import pysyncobj.pickle
import pysyncobj.tcp_connection
import pytest
from pysyncobj import SyncObj, SyncObjConf
from pysyncobj.node import TCPNode

from ferromq.broker.config import ConfigError
from ferromq.controller import raft_safety
from ferromq.controller.config import load_controller_config
from ferromq.controller.state import GroupTable
from ferromq.testing import free_port
from ferromq.testing.waiting import wait_until

LOGGER = "ferromq.controller.raft_safety"

# PySyncObj leaves its journal's meta file and a snapshot it sent open (closed by the GC).
pytestmark = pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <_io.FileIO:pytest.PytestUnraisableExceptionWarning"
)


class Reduces:
    """A pickle that calls `func(*args)` when loaded."""

    def __init__(self, func: Callable[..., Any], *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, ...]:
        return self.func, self.args


@pytest.fixture(autouse=True)
def fresh_warnings() -> Iterator[None]:
    """Each test sees its refusals logged (the rate limit is per host, process-wide)."""
    raft_safety._warned.clear()
    yield
    raft_safety._warned.clear()


# -- the restricted unpickler ----------------------------------------------------------------------


@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_refuses_every_global(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "pwned"
    hostile = [
        Reduces(os.system, f"touch {marker}"),
        Reduces(eval, f"open({str(marker)!r}, 'w')"),
        Reduces(open, str(marker), "w"),
        Reduces(getattr, "x", "upper"),
        Reduces(bytes, 1 << 30),  # bytes(n): n zero bytes
        Reduces(zlib.decompress, b"x"),
        [1, {"a": Reduces(os.remove, str(tmp_path))}],  # nested
        Reduces(__import__("codecs").encode, "x", "zlib_codec"),
        Reduces(__import__("_codecs").encode, b"x" * 10, "rot13"),
        logging.getLogger("x"),  # any class
    ]
    for obj in hostile:
        data = pickle.dumps(obj, protocol)
        with pytest.raises(pickle.UnpicklingError):
            raft_safety.safe_loads(data)
        with pytest.raises(pickle.UnpicklingError):
            raft_safety.safe_load(io.BytesIO(data))
    assert not marker.exists()


def test_accepts_pysyncobj_shapes() -> None:
    entry = (b"\x00" + pysyncobj.pickle.dumps((3, ["C", "g", "127.0.0.1:1", ""], {})), 7, 2)
    messages: list[Any] = [
        "127.0.0.1:9877",  # an incoming connection's first message: the peer's address
        os.urandom(32),  # with a password: the connection's key
        (os.urandom(32), {"type": "request_vote", "term": 3, "last_log_index": 5, "last_log_term": 2}),
        b"",
        {"type": "append_entries", "term": 2, "commit_index": 7, "entries": [entry], "prevLogIdx": 6,
         "prevLogTerm": 2},
        {"type": "append_entries", "term": 2, "commit_index": 7,
         "serialized": (b"\x1f\x8b" * 99, True, False)},
        {"type": "next_node_idx", "term": 2, "next_node_idx": 8, "success": True},
        ["status"],
        # A snapshot: SyncObj's and GroupTable's data, the last two entries, the members.
        ([{}, {"groups": {"g": {"brokers": {"127.0.0.1:1": {"id": 1, "haAddr": ""}}, "syncStateSet": [1]}}}],
         entry, entry, {TCPNode("127.0.0.1:1"), TCPNode("127.0.0.1:2")}),
        {"version": 1, "currentTerm": 4, "votedForNodeId": "127.0.0.1:2"},  # journal meta
    ]  # fmt: skip
    for message in messages:
        data = pysyncobj.pickle.dumps(message)  # protocol 2, as PySyncObj sends
        assert raft_safety.safe_loads(data) == message
        assert raft_safety.safe_loads(zlib.decompress(zlib.compress(data))) == message
        buf = io.BytesIO()
        with gzip.GzipFile(fileobj=buf, mode="wb") as g:  # the dump file's format
            pysyncobj.pickle.dump(message, g)
        with gzip.GzipFile(fileobj=io.BytesIO(buf.getvalue()), mode="rb") as g:
            assert raft_safety.safe_load(g) == message
    nodes = raft_safety.safe_loads(pysyncobj.pickle.dumps({TCPNode("127.0.0.1:5")}))
    assert [(n.address, n.host, n.port) for n in nodes] == [("127.0.0.1:5", "127.0.0.1", 5)]


def test_pysyncobj_internals_are_there() -> None:
    """Fails when PySyncObj no longer has what raft_safety patches (see its docstring)."""
    raft_safety.check_internals()
    raft_safety.install()
    conn = pysyncobj.tcp_connection.TcpConnection
    read, parse = conn._TcpConnection__processRead, conn._TcpConnection__processParseMessage
    raft_safety.install()  # idempotent: nothing wrapped twice
    assert (conn._TcpConnection__processRead, conn._TcpConnection__processParseMessage) == (read, parse)
    assert read.__qualname__.startswith("_wrap_read") and parse.__qualname__.startswith("_wrap_parse")
    assert pysyncobj.pickle.loads is raft_safety.safe_loads
    assert pysyncobj.pickle.load is raft_safety.safe_load
    assert pysyncobj.journal.loads is raft_safety.safe_loads
    assert pysyncobj.tcp_connection.zlib.decompress is raft_safety._bounded_decompress
    with pytest.raises(pickle.UnpicklingError):
        pysyncobj.pickle.loads(pickle.dumps(Reduces(os.getcwd)))
    bomb = zlib.compress(bytes(raft_safety.MAX_MESSAGE + 1))
    assert len(bomb) < raft_safety.MAX_FRAME_UNTRUSTED
    with pytest.raises(pickle.UnpicklingError, match="inflating beyond"):
        pysyncobj.tcp_connection.zlib.decompress(bomb)
    with pytest.raises(zlib.error):
        pysyncobj.tcp_connection.zlib.decompress(zlib.compress(b"abc")[:-2])


# -- the configuration -----------------------------------------------------------------------------


def _conf(tmp_path: Path, peers: str, password: str | None = None) -> Path:
    path = tmp_path / "controller.conf"
    text = f"controllerDLegerPeers = {peers}\ncontrollerDLegerSelfId = n0\n"
    path.write_text(text + (f"controllerRaftPassword = {password}\n" if password else ""))
    return path


@pytest.mark.parametrize(
    "peers",
    [
        "n0-10.0.0.1:9877;n1-10.0.0.2:9877",
        "n0-127.0.0.1:9877;n1-ctrl-b:9877",
        "n0-0.0.0.0:1",
        "n0-[fe80::1]:1",
    ],
)
def test_exposed_raft_ports_need_a_password(tmp_path: Path, peers: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_controller_config(_conf(tmp_path, peers))
    message = str(e.value)
    assert "set controllerRaftPassword, the same on every node" in message and "\n" not in message
    assert "127.0.0.1:9877" not in message  # names only the exposed ones
    cfg = load_controller_config(_conf(tmp_path, peers, "s3cret"))
    assert cfg.raft_password == "s3cret"


def test_loopback_raft_ports_need_no_password(tmp_path: Path) -> None:
    cfg = load_controller_config(_conf(tmp_path, "n0-127.0.0.1:1;n1-127.0.0.2:2;n2-localhost:3;n3-::1:4"))
    assert cfg.raft_password is None and len(cfg.peers) == 4


# -- a real PySyncObj group ------------------------------------------------------------------------


class Node:
    def __init__(self, store: Path, me: str, addrs: list[str], password: str | None) -> None:
        self.table = GroupTable()
        store.mkdir(parents=True, exist_ok=True)
        conf = SyncObjConf(
            journalFile=str(store / "journal"),
            fullDumpFile=str(store / "dump"),
            useFork=False,
            appendEntriesUseBatch=False,
            connectionRetryTime=0.3,
            bindRetryTime=0.2,
            bindAddress=me,
            password=password,
        )
        self.raft = SyncObj(me, [a for a in addrs if a != me], conf, consumers=[self.table])

    def stop(self) -> None:
        self.raft.destroy_synchronous()


@pytest.mark.parametrize("password", [None, "s3cret"], ids=["plain", "password"])
def test_group_replicates_snapshots_and_restarts_with_nothing_refused(
    tmp_path: Path, password: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    raft_safety.install()
    addrs = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    a, b = (Node(tmp_path / str(i), addrs[i], addrs, password) for i in range(2))
    nodes = [a, b]
    try:
        leader = wait_until(
            lambda: next((n for n in nodes if n.raft._isLeader()), None), "a leader", timeout=30.0
        )
        for i in range(20):
            leader.table.register(
                "C", f"g{i % 3}", f"127.0.0.1:{10_000 + i}", f"127.0.0.1:{20_000 + i}", sync=True, timeout=10
            )
        want = leader.table._serialize()
        wait_until(lambda: b.table._serialize() == want, "b to catch up", timeout=30.0)
        # The leader compacts its log: a node that joins now gets the snapshot.
        leader.raft.forceLogCompaction()
        wait_until(
            lambda: (tmp_path / str(nodes.index(leader)) / "dump").exists(), "a snapshot", timeout=30.0
        )
        wait_until(lambda: leader.raft.getStatus()["log_len"] <= 3, "the log compacted", timeout=30.0)
        c = Node(tmp_path / "2", addrs[2], addrs, password)
        nodes.append(c)
        wait_until(lambda: c.table._serialize() == want, "c to get the snapshot", timeout=30.0)
        assert (tmp_path / "2" / "dump").exists()
        snapshot = want
        leader.table.register("C", "g9", "127.0.0.1:9", "", sync=True, timeout=10)
        want = leader.table._serialize()
        wait_until(lambda: c.table._serialize() == want, "c to get the next entry", timeout=30.0)
    finally:
        for n in nodes:
            n.stop()
    # Alone (no majority: nothing more is committed), c comes back from its snapshot file; then
    # the others from theirs and their journals.
    nodes = [Node(tmp_path / "2", addrs[2], addrs, password)]
    try:
        wait_until(
            lambda: nodes[0].table._serialize() in (snapshot, want), "c's state from its files", timeout=30.0
        )
        nodes += [Node(tmp_path / str(i), addrs[i], addrs, password) for i in range(2)]
        wait_until(
            lambda: all(n.table._serialize() == want for n in nodes), "the group's state back", timeout=30.0
        )
    finally:
        for n in nodes:
            n.stop()
    assert not [r for r in caplog.records if r.name == LOGGER], caplog.text


def _frame(message: Any) -> bytes:
    data = zlib.compress(pickle.dumps(message))
    return struct.pack("i", len(data)) + data


def _closed(sock: socket.socket, timeout: float = 5.0) -> bool:
    """True when the peer closes the connection within `timeout` (what it sends is dropped)."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return False


def test_bad_frames_close_the_connection_logged_once_per_host(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    raft_safety.install()
    addr = f"127.0.0.1:{free_port()}"
    node = Node(tmp_path, addr, [addr], None)
    host, port = addr.rsplit(":", 1)
    bomb = zlib.compress(bytes(raft_safety.MAX_MESSAGE + 1))  # ~64 KiB that inflate to 64 MiB + 1
    hostile = [
        struct.pack("i", -5) + b"x" * 10,
        struct.pack("i", raft_safety.MAX_FRAME_UNTRUSTED + 1),
        _frame(Reduces(os.getcwd)),
        struct.pack("i", 3) + b"abc",  # not zlib
        struct.pack("i", len(bomb)) + bomb,
    ]
    try:
        wait_until(node.raft._isLeader, "the node to lead", timeout=30.0)
        for i, data in enumerate(hostile):
            with socket.create_connection((host, int(port)), timeout=5) as s:
                s.sendall(data)
                assert _closed(s), f"frame {i} did not close the connection"
        # One line for 127.0.0.1 (the rest within 10 s are counted), another for 127.0.0.2.
        with socket.socket() as s:
            s.bind(("127.0.0.2", 0))
            s.connect((host, int(port)))
            s.sendall(struct.pack("i", -1))
            assert _closed(s)
        lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
        assert len(lines) == 2, lines
        assert lines[0].startswith("Raft port refused 127.0.0.1:") and "a frame of -5 bytes" in lines[0]
        assert lines[1].startswith("Raft port refused 127.0.0.2:") and "a frame of -1 bytes" in lines[1]
        assert raft_safety._warned["127.0.0.1"][1] == len(hostile) - 1
        # The node still works.
        node.table.register("C", "g", "127.0.0.1:1", "", sync=True, timeout=10)
    finally:
        node.stop()


def test_refusal_lines_are_rate_limited_in_a_bounded_table(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    for i in range(raft_safety.MAX_WARNED_HOSTS + 50):
        raft_safety._warn(f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}:1", "x")
    assert len(raft_safety._warned) == raft_safety.MAX_WARNED_HOSTS
    assert len(caplog.records) == raft_safety.MAX_WARNED_HOSTS + 50
    caplog.clear()
    for port in range(100):
        raft_safety._warn(f"192.0.2.1:{port}", "x")
    assert len(caplog.records) == 1
