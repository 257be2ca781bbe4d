"""The engine socket: where its key lives, and how a message is framed.

A unix socket (``multiprocessing.connection``, length-prefixed frames) carries
only JSON protocol messages (``send_bytes``/``recv_bytes``, never pickle).
The server writes a random key into a 0600 file beside the socket; a client
proves it may connect by sending that key as its first frame. Socket and key
live in a private directory (0700, owned by this user: ``serve`` makes one
with ``mkdtemp``), so no other user can reach, replace or read them. One
frame is at most ``MAX_MESSAGE_BYTES``: a peer announcing more is cut off
before anything is allocated.
"""

from __future__ import annotations

import os
import secrets
import socket
import stat
import tempfile
from typing import Any

from .. import protocol
from ..config import ENV_ENGINE_SOCKET, ConfigError

KEY_BYTES = 32
SOCKET_NAME = "engine.sock"
# Far above any real message (a 4096-token prompt is ~30 KB, a step's outputs
# for hundreds of sequences a few hundred KB), far below what hurts.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


def make_private_socket_path() -> str:
    """A socket path in a fresh 0700 directory (``serve`` calls this when none is configured)."""
    return os.path.join(tempfile.mkdtemp(prefix="llm_byoc-"), SOCKET_NAME)


def check_private_dir(socket_path: str) -> None:
    """The socket's directory must be a real directory, ours, closed to others."""
    if not socket_path:
        raise ConfigError(f"{ENV_ENGINE_SOCKET} is not set (serve sets it to a private directory)")
    folder = os.path.dirname(os.path.abspath(socket_path))
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        os.makedirs(folder, mode=0o700)
        info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise ConfigError(
            f"{ENV_ENGINE_SOCKET}={socket_path!r}: its directory must be owned by this user and "
            f"closed to others (mode 0700), not {stat.filemode(info.st_mode)} owned by uid {info.st_uid}"
        )


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
    data = protocol.encode(message)
    if len(data) > MAX_MESSAGE_BYTES:
        raise protocol.ProtocolError(f"a {type(message).__name__} of {len(data)} bytes is over the frame limit")
    conn.send_bytes(data)


def recv(conn: Any) -> Any:
    """The next message; OSError ("bad message length") for a frame over the limit."""
    return protocol.decode(conn.recv_bytes(MAX_MESSAGE_BYTES))


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
