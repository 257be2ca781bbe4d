"""The engine process of the container: ``python -m llm_byoc.engine.server``.

One engine core (scheduler + step loop + model worker process) serves many
front ends (one connection per gunicorn worker process, shared by its
threads) over a unix socket. Each sequence's outputs go back to the
connection that added it; when a connection drops, its sequences are aborted.

The socket comes up at once (health LOADING while the model loads). When the
model worker dies, every sequence fails with EngineDead, health says DEAD for
a moment, then the process exits non-zero (the container's supervisor then
stops too). SIGTERM: stop, shut the worker down, exit 0.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from multiprocessing.connection import Listener

from ..config import ConfigError, EngineConfig, ServerConfig
from ..protocol import EngineOutputs, EngineState
from . import engine_socket
from .engine_choice import make_core
from .server_connection import FrontConnection

log = logging.getLogger(__name__)

DEAD_LINGER_S = 1.0  # after the worker died, keep answering health (DEAD) this long


class EngineServer:
    def __init__(self, config: EngineConfig, socket_path: str, worker_target=None):
        self.socket_path = socket_path
        self.core = make_core(config, self._route, worker_target)
        self._owners: dict[str, FrontConnection] = {}  # seq_id -> the connection that added it
        self._lock = threading.Lock()
        self._connections: set[FrontConnection] = set()
        self._stop = threading.Event()
        self._listener: Listener | None = None

    # --- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        """Bind the socket and start loading the model; returns at once."""
        self._listener, self._key = engine_socket.listen(self.socket_path)
        self.core.start()
        threading.Thread(target=self._accept_loop, name="engine-accept", daemon=True).start()
        log.info("engine server listening on %s", self.socket_path)

    def stop(self) -> None:
        """Ask ``run`` to return (safe from a signal handler)."""
        self._stop.set()

    def run(self) -> int:
        """Serve until stopped (exit code 0) or until the worker dies (exit code 1)."""
        while not self._stop.wait(0.2):
            if self.core.state is EngineState.DEAD:
                log.error("engine dead: %s", self.core.health().detail)
                time.sleep(DEAD_LINGER_S)
                self._close()
                return 1
        log.info("stopping the engine server")
        self.core.shutdown()
        self._close()
        return 0

    def _close(self) -> None:
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            connection.close()
        engine_socket.remove(self.socket_path)

    # --- connections -------------------------------------------------------------

    def _accept_loop(self) -> None:
        while True:
            try:
                conn = self._listener.accept()
            except OSError:
                return  # the listener was closed
            threading.Thread(target=self._serve, args=(conn,), name="engine-conn", daemon=True).start()

    def _serve(self, conn) -> None:
        channel = engine_socket.admit(conn, self._key)
        if channel is None:
            return
        connection = FrontConnection(channel, self.core, self._own, self._disown)
        with self._lock:
            self._connections.add(connection)
        connection.serve()  # returns when the front end goes away
        with self._lock:
            self._connections.discard(connection)
            mine = [s for s, c in self._owners.items() if c is connection]
            for seq_id in mine:
                del self._owners[seq_id]
        for seq_id in mine:
            self.core.abort(seq_id)
        if mine:
            log.info("a front end disconnected; aborted its %d sequences", len(mine))

    def _own(self, seq_id: str, connection: FrontConnection) -> bool:
        with self._lock:
            if seq_id in self._owners:
                return False
            self._owners[seq_id] = connection
            return True

    def _disown(self, seq_id: str, connection: FrontConnection) -> bool:
        with self._lock:
            if self._owners.get(seq_id) is connection:
                del self._owners[seq_id]
                return True
            return False

    def _route(self, outputs: EngineOutputs) -> None:
        """Core outputs -> the owning connections' send queues (never blocks)."""
        batches: dict[FrontConnection, EngineOutputs] = {}
        with self._lock:
            for update in outputs.updates:
                owner = self._owners.get(update.seq_id)
                if owner is not None:
                    batches.setdefault(owner, EngineOutputs()).updates.append(update)
                    if update.finish_reason is not None:
                        del self._owners[update.seq_id]
            for rejected in outputs.rejected:
                owner = self._owners.pop(rejected.seq_id, None)
                if owner is not None:
                    batches.setdefault(owner, EngineOutputs()).rejected.append(rejected)
        for connection, batch in batches.items():
            connection.enqueue(batch)


def serve(config: EngineConfig, socket_path: str, worker_target=None) -> int:
    """Run an engine server in this process until SIGTERM/SIGINT or worker death."""
    server = EngineServer(config, socket_path, worker_target)
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    signal.signal(signal.SIGINT, lambda *_: server.stop())
    server.start()
    return server.run()


def main(argv: list[str] | None = None) -> int:
    """Configured by the environment only (EngineConfig/ServerConfig.from_env)."""
    server_config = ServerConfig.from_env()
    logging.basicConfig(
        level=server_config.log_level.upper(),
        format="%(asctime)s %(levelname)s [engine] %(name)s: %(message)s",
    )
    try:
        return serve(EngineConfig.from_env(), server_config.engine_socket)
    except ConfigError as exc:
        log.error("%s", exc)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
