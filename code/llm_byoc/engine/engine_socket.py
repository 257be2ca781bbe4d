"""The engine socket: where it and its key live, how a peer gets in.

A unix socket (``multiprocessing.connection``) carries the same call-id frames
as the model worker's pipe (``process.Channel``: JSON protocol messages, never
pickle). The server writes a random key into a 0600 file beside the socket; a
client proves it may connect by sending that key as its first frame. Socket
and key live in a private directory (0700, owned by this user: ``serve`` makes
one with ``mkdtemp``), so no other user can reach, replace or read them. One
frame is at most ``MAX_MESSAGE_BYTES``: a peer announcing more is cut off
before anything is allocated.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
import tempfile
from multiprocessing.connection import Client, Connection, Listener

from .. import protocol
from ..config import ENV_ENGINE_SOCKET, ConfigError
from ..process.channel import Channel

KEY_BYTES = 32
SOCKET_NAME = "engine.sock"
# Far above any real message (a 4096-token prompt is ~30 KB, a step's outputs
# for hundreds of sequences a few hundred KB), far below what hurts.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
AUTH_TIMEOUT_S = 5.0
PUSH = 0  # the call id of what the engine sends unasked (outputs) and of what needs no answer


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


def listen(socket_path: str) -> tuple[Listener, bytes]:
    """Bind the socket (0600, in a private directory) and write a fresh key beside it."""
    check_private_dir(socket_path)
    if os.path.exists(socket_path):
        os.unlink(socket_path)  # a stale socket from an earlier run
    key = write_key(socket_path)
    old_umask = os.umask(0o177)  # the socket file is created 0600
    try:
        return Listener(socket_path, family="AF_UNIX"), key
    finally:
        os.umask(old_umask)


def remove(socket_path: str) -> None:
    for path in (socket_path, key_path(socket_path)):
        if os.path.exists(path):
            os.unlink(path)


def admit(conn: Connection, key: bytes) -> Channel | None:
    """The server's side of a new connection: a channel once it sent the key, else None."""
    try:
        if conn.poll(AUTH_TIMEOUT_S) and hmac.compare_digest(conn.recv_bytes(256), key):
            return Channel(conn, protocol, MAX_MESSAGE_BYTES)
    except (EOFError, OSError):
        pass
    conn.close()
    return None


def connect(socket_path: str) -> Channel:
    """Connect and send the key; OSError (FileNotFoundError, ConnectionRefusedError) while the
    server is not listening yet."""
    conn = Client(socket_path, family="AF_UNIX")
    try:
        conn.send_bytes(read_key(socket_path))
    except OSError:
        conn.close()
        raise
    return Channel(conn, protocol, MAX_MESSAGE_BYTES)
