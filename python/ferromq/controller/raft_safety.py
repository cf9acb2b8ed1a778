"""Makes PySyncObj, the controller's Raft library, safe to expose on a TCP port.

PySyncObj 0.3 unpickles whatever a peer sends (and a pickle can run any code), buffers a frame of
whatever length its 4-byte prefix claims before it authenticates anything, and drops a refused peer
without a word. `install()` (idempotent; `Controller.start` calls it) changes that, process-wide:

- every unpickling PySyncObj does (messages, replicated commands, snapshots received or read back
  from the dump file, the journal's meta) goes through `safe_loads` / `safe_load`, whose
  `find_class` refuses every global but the few PySyncObj's own messages and snapshots hold;
- a frame longer than `MAX_FRAME_UNTRUSTED` before the connection delivered a valid message (with
  a password: before the peer proved it knows it), longer than `MAX_FRAME` after, or negative,
  closes the connection before it is buffered; no frame inflates beyond `MAX_MESSAGE`;
- each refusal is logged at WARNING with the peer's address, at most once per host per
  `WARN_EVERY` seconds (a bounded table of hosts).

This reaches PySyncObj internals, the same in 0.3.14 and 0.3.17 (read in both; pyproject pins
`pysyncobj>=0.3.14,<0.4`, and `check_internals()`, run by `install()` and by
tests/unit/test_controller_raft.py, fails loudly if they move):

- module attributes `pysyncobj.pickle.loads` / `load` (syncobj.py, serializer.py and
  tcp_connection.py call them through the module), `pysyncobj.journal.loads` (imported by name)
  and `pysyncobj.tcp_connection.zlib`;
- `TcpConnection`'s name-mangled methods `__processRead` / `__processParseMessage` and attributes
  `__readBuffer` / `__socket`.
"""

from __future__ import annotations

import io
import logging
import pickle
import struct
import threading
import time
import types
import zlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from pysyncobj.node import TCPNode

logger = logging.getLogger(__name__)

MAX_FRAME_UNTRUSTED = 1 << 20
"""A frame before the connection's first valid message: PySyncObj's first message is an address
or a 32-byte key, and its later ones stay under 64 KiB plus a little (appendEntriesBatchSizeBytes,
logCompactionBatchSize)."""
MAX_FRAME = 64 << 20
MAX_MESSAGE = 64 << 20
"""How far one frame may inflate (zlib): a small frame must not become a huge one."""
WARN_EVERY = 10.0
MAX_WARNED_HOSTS = 1024

_PROTOCOL2_BYTES = "latin1"


class RefusedPickle(pickle.UnpicklingError):
    pass


_why = threading.local()
"""What the last refused unpickle or inflate on this thread was (for the log line)."""


def _refused(reason: str) -> RefusedPickle:
    _why.reason = reason
    return RefusedPickle(reason)


def _bytes_from_latin1(text: object, encoding: object) -> bytes:
    # Protocol 2 (PySyncObj's) pickles non-empty bytes as _codecs.encode(text, "latin1").
    if not isinstance(text, str) or encoding != _PROTOCOL2_BYTES:
        raise _refused("a pickle calling _codecs.encode, not as protocol 2's bytes")
    return text.encode(_PROTOCOL2_BYTES)


def _empty_bytes(*args: object) -> bytes:
    # ... and empty bytes as bytes(); bytes(n) would allocate n bytes.
    if args:
        raise _refused("a pickle calling bytes() with arguments")
    return b""


_ALLOWED: dict[tuple[str, str], Any] = {
    ("_codecs", "encode"): _bytes_from_latin1,
    ("__builtin__", "bytes"): _empty_bytes,
    ("builtins", "bytes"): _empty_bytes,
    # A snapshot holds the cluster's members: a set of TCPNode (BUILD fills their __dict__; they
    # have no __setstate__).
    ("__builtin__", "set"): set,
    ("builtins", "set"): set,
    ("pysyncobj.node", "TCPNode"): TCPNode,
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        found = _ALLOWED.get((module, name))
        if found is None:
            raise _refused(f"a pickle importing {module}.{name}")
        return found


def safe_loads(data: bytes | str) -> Any:
    """`pickle.loads` that refuses any global but PySyncObj's own few."""
    return safe_load(io.BytesIO(data if isinstance(data, bytes) else data.encode("utf-8")))


def safe_load(file: IO[bytes]) -> Any:
    return _Unpickler(file).load()


def _bounded_decompress(data: bytes) -> bytes:
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, MAX_MESSAGE)
    if inflater.unconsumed_tail:
        raise _refused(f"a frame inflating beyond {MAX_MESSAGE} bytes")
    if not inflater.eof:
        raise zlib.error("incomplete or truncated stream")
    return out


# -- connections ---------------------------------------------------------------------------------


@dataclass
class _Link:
    """What we know of one socket of a TcpConnection (PySyncObj reuses the object to reconnect)."""

    sock: object
    peer: str
    trusted: bool = False


def _link(conn: Any) -> _Link:
    sock = conn._TcpConnection__socket
    link: _Link | None = conn.__dict__.get("_ferromq_link")
    if link is None or link.sock is not sock:
        try:
            host, port = sock.getpeername()[:2]
            peer = f"{host}:{port}"
        except (OSError, AttributeError):
            peer = "an unknown peer"
        link = _Link(sock, peer)
        conn._ferromq_link = link
    return link


def _frame_refused(conn: Any, link: _Link) -> bool:
    """Closes the connection if the frame at the head of its buffer is too long (or negative)."""
    buf = conn._TcpConnection__readBuffer
    if len(buf) < 4:
        return False
    (length,) = struct.unpack_from("i", buf)
    bound = MAX_FRAME if link.trusted else MAX_FRAME_UNTRUSTED
    if 0 <= length <= bound:
        return False
    stage = "" if link.trusted else " before authenticating"
    _warn(link.peer, f"a frame of {length} bytes{stage} (at most {bound})")
    conn.disconnect()
    return True


def _wrap_read(original: Callable[[Any], bool]) -> Callable[[Any], bool]:
    def read(conn: Any) -> bool:
        link = _link(conn)  # before a disconnect closes the socket: its peer's address
        more = original(conn)
        if conn._TcpConnection__socket is None or _frame_refused(conn, link):
            return False
        buf = conn._TcpConnection__readBuffer
        if len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from("i", buf)[0]:
            return False  # a whole frame is in: parse it before reading more (the poll is level-triggered)
        return more

    return read


def _wrap_parse(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def parse(conn: Any) -> Any:
        link = _link(conn)
        if _frame_refused(conn, link):
            return None
        _why.reason = None
        message = original(conn)
        if message is not None:
            link.trusted = True
        elif conn._TcpConnection__socket is None:
            # PySyncObj dropped the connection: the frame did not decrypt, inflate or unpickle.
            reason = _why.reason or (
                "a frame that failed authentication (another controllerRaftPassword?)"
                if conn.encryptor
                else "a frame that is not a PySyncObj message"
            )
            _warn(link.peer, reason)
        return message

    return parse


# -- rate-limited warnings -----------------------------------------------------------------------

_warned: OrderedDict[str, tuple[float, int]] = OrderedDict()
"""host -> (when its last line was logged, refusals not logged since)."""
_warned_lock = threading.Lock()


def _warn(peer: str, reason: str) -> None:
    host = peer.rpartition(":")[0] or peer  # new source ports must not make new lines
    now = time.monotonic()
    with _warned_lock:
        last, quiet = _warned.get(host, (-WARN_EVERY, 0))
        if now - last < WARN_EVERY:
            _warned[host] = (last, quiet + 1)
            return
        _warned[host] = (now, 0)
        _warned.move_to_end(host)
        while len(_warned) > MAX_WARNED_HOSTS:
            _warned.popitem(last=False)
    more = f" ({quiet} more refused since the last line)" if quiet else ""
    logger.warning("Raft port refused %s: %s%s", peer, reason, more)


# -- installing ----------------------------------------------------------------------------------

_INTERNALS = (
    ("pysyncobj.pickle", "loads"),
    ("pysyncobj.pickle", "load"),
    ("pysyncobj.journal", "loads"),
    ("pysyncobj.tcp_connection", "zlib"),
    ("pysyncobj.tcp_connection", "TcpConnection._TcpConnection__processRead"),
    ("pysyncobj.tcp_connection", "TcpConnection._TcpConnection__processParseMessage"),
)


def check_internals() -> None:
    """Raises RuntimeError naming the PySyncObj internals this module needs and cannot find."""
    import importlib

    missing = []
    for module_name, path in _INTERNALS:
        obj: Any = importlib.import_module(module_name)
        for part in path.split("."):
            obj = getattr(obj, part, None)
        if obj is None:
            missing.append(f"{module_name}.{path}")
    # Instance attributes: look for them in the constructor's code.
    from pysyncobj.tcp_connection import TcpConnection

    names = TcpConnection.__init__.__code__.co_names
    missing += [
        f"TcpConnection.{a}"
        for a in ("_TcpConnection__readBuffer", "_TcpConnection__socket", "encryptor")
        if a not in names
    ]
    if missing:
        raise RuntimeError(
            "this PySyncObj lacks what ferromq.controller.raft_safety patches "
            f"({', '.join(missing)}): use pysyncobj>=0.3.14,<0.4"
        )


_installed = False
_install_lock = threading.Lock()


def install() -> None:
    """Patches PySyncObj in this process (once; later calls do nothing)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        check_internals()
        import pysyncobj.journal
        import pysyncobj.pickle
        import pysyncobj.tcp_connection as tcp

        pysyncobj.pickle.loads = safe_loads
        pysyncobj.pickle.load = safe_load
        pysyncobj.journal.loads = safe_loads
        tcp.zlib = types.SimpleNamespace(compress=zlib.compress, decompress=_bounded_decompress)
        conn = tcp.TcpConnection
        conn._TcpConnection__processRead = _wrap_read(conn._TcpConnection__processRead)
        conn._TcpConnection__processParseMessage = _wrap_parse(conn._TcpConnection__processParseMessage)
        _installed = True
