"""Frames on a worker pipe: (call id, typed message, raw payload).

A message is one frame: an 9-byte header (the call id, and whether a payload
frame follows) and the message as JSON, built by a codec that rebuilds only
its own registered dataclasses (``protocol`` or ``multimodel.messages``), so a
peer never makes us unpickle anything. A payload (an HTTP body, as it came)
travels as a second frame, untouched. Call id 0 is the handshake and control
messages; a reply carries the id of its call. Both process boundaries use it:
the engine and its model worker (a pipe), the HTTP workers and the engine (the
engine socket, ``engine/engine_socket.py``, where a frame is also size-limited).
"""

from __future__ import annotations

import os
import socket
import struct
import threading
from typing import Any, Protocol

_HEADER = struct.Struct(">QB")  # call id, 1 if a payload frame follows


class Codec(Protocol):
    def encode(self, message: Any) -> bytes: ...

    def decode(self, data: bytes) -> Any: ...


class BadFrame(ValueError):
    """A frame that is not a message of the codec; ``call_id`` is 0 when unknown."""

    def __init__(self, call_id: int, reason: str):
        super().__init__(reason)
        self.call_id = call_id


class Channel:
    """One end of a duplex ``multiprocessing`` Connection. Sends are serialised; one reader at a time."""

    def __init__(self, conn, codec: Codec, max_frame_bytes: int | None = None):
        """``max_frame_bytes``: a peer announcing a longer frame is cut off before anything is
        allocated (receive raises OSError), and a longer message is not sent (BadFrame)."""
        self.conn = conn
        self._codec = codec
        self._max = max_frame_bytes
        self._send_lock = threading.Lock()

    def send(self, call_id: int, message: Any, payload: bytes = b"", lock_timeout_s: float | None = None) -> bool:
        """Write one message; False if the send lock was not had within ``lock_timeout_s``.

        OSError/ValueError when the peer is gone or the connection is closed.
        """
        header = _HEADER.pack(call_id, 1 if payload else 0) + self._codec.encode(message)
        if self._max is not None and max(len(header), len(payload)) > self._max:
            raise BadFrame(call_id, f"a {type(message).__name__} of {len(header)} bytes is over the frame limit")
        if not self._send_lock.acquire(timeout=-1 if lock_timeout_s is None else lock_timeout_s):
            return False
        try:
            self.conn.send_bytes(header)
            if payload:
                self.conn.send_bytes(payload)
        finally:
            self._send_lock.release()
        return True

    def receive(self) -> tuple[int, Any, bytes]:
        """Read one message; EOFError/OSError when the peer is gone, BadFrame for foreign bytes."""
        frame = self.conn.recv_bytes(self._max)
        if len(frame) < _HEADER.size:
            raise BadFrame(0, f"a frame of {len(frame)} bytes has no header")
        call_id, has_payload = _HEADER.unpack_from(frame)
        if has_payload not in (0, 1):
            raise BadFrame(0, "a frame header whose payload flag is neither 0 nor 1")
        payload = self.conn.recv_bytes(self._max) if has_payload else b""
        try:
            message = self._codec.decode(frame[_HEADER.size:])
        except (ValueError, RecursionError) as exc:  # the codec's error, or JSON nested too deep
            raise BadFrame(call_id, str(exc)) from None
        return call_id, message, payload

    def poll(self, timeout_s: float | None) -> bool:
        return self.conn.poll(timeout_s)

    def close(self) -> None:
        self.conn.close()

    def hang_up(self) -> None:
        """Shut a socket down both ways, so a thread blocked in ``receive`` sees EOF.

        (Closing the handle under a reading thread would not wake it reliably.)
        """
        try:
            sock = socket.socket(fileno=os.dup(self.conn.fileno()))
        except (OSError, ValueError):
            return  # already closed
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            sock.close()
