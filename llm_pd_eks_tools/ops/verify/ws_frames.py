"""The receiving half of the pod exec WebSocket: RFC 6455 server frames, the v4.channel.k8s.io channels.

The `kubernetes` client has its own exec stream (websocket-client), but no deadline on the exchange as a
whole and no cap on what it buffers, so verify keeps this reader on the stream of an io_safety
`http_exchange` (its every read is bound to the run's deadline) and counts every byte against a cap.

The protocol (kubernetes staging/src/k8s.io/apimachinery/pkg/util/remotecommand/constants.go,
StreamProtocolV4Name; k8s.io/apiserver/pkg/util/wsstream/conn.go): every binary message starts with its
channel byte (1 stdout, 2 stderr, 3 error: a v1 Status, `Success` or `Failure` with the exit code in
`details.causes`); the server ends with a close frame.
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
from typing import Protocol

# RFC 6455 section 1.3: the GUID a server appends to Sec-WebSocket-Key before hashing it.
WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
EXEC_PROTOCOL = "v4.channel.k8s.io"
STDOUT_CHANNEL, STDERR_CHANNEL, ERROR_CHANNEL = 1, 2, 3
TEXT, BINARY, CLOSE = 1, 2, 8


class FrameError(ValueError):
    """The peer's frames are not a WebSocket stream verify can read (cut short, larger than the cap)."""


class Stream(Protocol):
    def read(self, n: int, /) -> bytes: ...


def websocket_key() -> str:
    """A fresh Sec-WebSocket-Key (RFC 6455 section 4.1: 16 random bytes, base64)."""
    return base64.b64encode(os.urandom(16)).decode()


def websocket_accept(key: str) -> str:
    """Sec-WebSocket-Accept for `key` (RFC 6455 section 4.2.2, step 5.4)."""
    return base64.b64encode(hashlib.sha1((key + WEBSOCKET_GUID).encode()).digest()).decode()


def upgrade_headers(key: str) -> dict[str, str]:
    """The handshake's request headers for the exec subprotocol (RFC 6455 section 4.1)."""
    return {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": key,
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Protocol": EXEC_PROTOCOL,
    }


class FrameReader:
    """Frames from `stream`, at most `max_bytes` read in all (frame headers included)."""

    def __init__(self, stream: Stream, max_bytes: int):
        self.stream, self.max_bytes, self.total = stream, max_bytes, 0

    def exactly(self, n: int) -> bytes:
        if self.total + n > self.max_bytes:
            raise FrameError(f"exec: the reply is larger than the {self.max_bytes} bytes verify reads")
        data = self.stream.read(n) if n else b""
        self.total += len(data)
        if len(data) < n:
            raise FrameError("exec: the connection closed mid-reply")
        return data

    def frame(self) -> tuple[int, bytes]:
        """One server message (RFC 6455 section 5.2), unmasked if the server masked it: its fragments
        joined, with the first frame's opcode (the continuations carry 0)."""
        payload, message_opcode = b"", None
        while True:
            first, second = self.exactly(2)
            opcode, length = first & 0x0F, second & 0x7F
            message_opcode = opcode if message_opcode is None else message_opcode
            if length == 126:
                length = struct.unpack(">H", self.exactly(2))[0]
            elif length == 127:
                length = struct.unpack(">Q", self.exactly(8))[0]
            mask = self.exactly(4) if second & 0x80 else b""
            data = self.exactly(length)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            payload += data
            if first & 0x80:  # FIN
                return message_opcode, payload


def exec_channels(reader: FrameReader) -> tuple[bytes, bytes]:
    """stdout and the error channel's bytes (a v1 Status), read until the server's close frame."""
    out: list[bytes] = []
    error = b""
    while True:
        opcode, payload = reader.frame()
        if opcode == CLOSE:
            return b"".join(out), error
        if opcode in (TEXT, BINARY) and payload:
            channel, data = payload[0], payload[1:]
            if channel == STDOUT_CHANNEL:
                out.append(data)
            elif channel == ERROR_CHANNEL:
                error += data
