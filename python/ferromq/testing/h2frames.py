"""HTTP/2 frames by hand, for the tests that play a hostile peer of the gRPC port (RFC 9113): a
client that resets streams as fast as it opens them, never ends its headers, opens more streams
than allowed, reads nothing, or sends what is not HTTP/2 at all. No HTTP/2 library would send
these, so the frames are written here: a frame header and a payload, HPACK literals without
indexing or Huffman coding."""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 7, 8, 9
END_STREAM, END_HEADERS = 0x1, 0x4
# Error codes (RFC 9113 §7).
PROTOCOL_ERROR, FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, ENHANCE_YOUR_CALM = 0x1, 0x6, 0x7, 0x8, 0xB
SETTINGS_IDS = {"max_concurrent_streams": 3, "initial_window_size": 4, "max_frame_size": 5}
SERVICE = "/apache.rocketmq.v2.MessagingService/"


@dataclass(frozen=True)
class Frame:
    kind: int
    flags: int
    stream: int
    payload: bytes

    @property
    def error_code(self) -> int:
        """A GOAWAY's or an RST_STREAM's error code."""
        at = 4 if self.kind == GOAWAY else 0
        return int.from_bytes(self.payload[at : at + 4], "big")


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def _hpack_int(value: int, prefix_bits: int) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([value])
    out = [limit]
    value -= limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def literal(name: str, value: str) -> bytes:
    """A header field as an HPACK literal without indexing, new name."""
    n, v = name.encode(), value.encode()
    return b"\x00" + _hpack_int(len(n), 7) + n + _hpack_int(len(v), 7) + v


def call_headers(method: str, **extra: str) -> bytes:
    """The header block of a gRPC call to MessagingService's `method`."""
    fields = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", SERVICE + method),
        (":authority", "127.0.0.1"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        *extra.items(),
    ]
    return b"".join(literal(k, v) for k, v in fields)


def grpc_message(body: bytes) -> bytes:
    """A gRPC length-prefixed message (not compressed)."""
    return b"\x00" + struct.pack(">I", len(body)) + body


def settings(**values: int) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HI", SETTINGS_IDS[k], v) for k, v in values.items()))


def connect(endpoint: str, **settings_values: int) -> socket.socket:
    """A connection that has sent the client preface and its SETTINGS."""
    host, port = endpoint.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(PREFACE + settings(**settings_values))
    return s


def send_until_closed(s: socket.socket, data: bytes, times: int) -> int:
    """Sends `data` up to `times` times; how many went before the server closed the connection."""
    for n in range(times):
        try:
            s.sendall(data)
        except OSError:
            return n
    return times


def read_frames(s: socket.socket, seconds: float) -> tuple[list[Frame], bool]:
    """The frames the server sends within `seconds`, and whether it closed the connection by then
    (reading stops at the close)."""
    s.settimeout(0.1)
    buf = b""
    frames: list[Frame] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(1 << 16)
        except TimeoutError:
            continue
        except OSError:
            return frames, True
        if not chunk:
            return frames, True
        buf += chunk
        while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
            n = int.from_bytes(buf[:3], "big")
            frames.append(Frame(buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9 : 9 + n]))
            buf = buf[9 + n :]
    return frames, False


def goaway(frames: list[Frame]) -> Frame | None:
    return next((f for f in frames if f.kind == GOAWAY), None)
