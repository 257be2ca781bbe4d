"""The engine socket: where its key lives, and how a message is framed.

A unix socket (``multiprocessing.connection``, length-prefixed frames) carries
only JSON protocol messages (``send_bytes``/``recv_bytes``, never pickle).
The server writes a random key into a 0600 file beside the socket; a client
proves it may connect by sending that key as its first frame.
"""

from __future__ import annotations

import os
import secrets
import socket
from typing import Any

from .. import protocol

KEY_BYTES = 32


def key_path(socket_path: str) -> str:
    return socket_path + ".key"


def write_key(socket_path: str) -> bytes:
    """A fresh key in a file only this user can read (replacing any old one)."""
    key = secrets.token_hex(KEY_BYTES).encode()
    path = key_path(socket_path)
    if os.path.exists(path):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    return key


def read_key(socket_path: str) -> bytes:
    with open(key_path(socket_path), "rb") as f:
        return f.read().strip()


def send(conn: Any, message: Any) -> None:
    conn.send_bytes(protocol.encode(message))


def recv(conn: Any) -> Any:
    return protocol.decode(conn.recv_bytes())


def hang_up(conn: Any) -> None:
    """Shut the socket down both ways: a thread blocked reading it sees EOF.

    (Closing the handle under a reading thread would not wake it reliably.)
    """
    try:
        sock = socket.socket(fileno=os.dup(conn.fileno()))
    except (OSError, ValueError):
        return  # already closed
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()
