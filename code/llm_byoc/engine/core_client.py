"""How the front end reaches the engine core: in this process, or over a socket.

``LLMEngine`` talks to a ``CoreClient``; ``InProcessCore`` calls the core
directly, ``SocketCoreClient`` (client.py) sends the same messages to an
engine server process. ``add`` is all-or-nothing: when one sequence of a
request is refused, none of them stays queued and the error is raised.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..config import EngineConfig
from ..protocol import AddSequence, EngineOutputs, HealthReport
from .core import EngineCore


class CoreClient(Protocol):
    def add(self, adds: list[AddSequence]) -> None: ...

    def abort(self, seq_ids: list[str]) -> None: ...

    def health(self, timeout_s: float | None = None) -> HealthReport: ...

    def wait_ready(self, timeout_s: float | None) -> None: ...

    def shutdown(self) -> None: ...


class InProcessCore:
    def __init__(self, config: EngineConfig, on_outputs: Callable[[EngineOutputs], None], worker_target=None):
        self.core = EngineCore(config, on_outputs, worker_target)

    def start(self) -> None:
        self.core.start()

    def add(self, adds: list[AddSequence]) -> None:
        added: list[str] = []
        try:
            for add in adds:
                self.core.add(add)
                added.append(add.seq_id)
        except BaseException:
            self.abort(added)
            raise

    def abort(self, seq_ids: list[str]) -> None:
        for seq_id in seq_ids:
            self.core.abort(seq_id)

    def health(self, timeout_s: float | None = None) -> HealthReport:
        return self.core.health()  # in this process: never waits

    def wait_ready(self, timeout_s: float | None) -> None:
        self.core.wait_ready(timeout_s)

    def shutdown(self) -> None:
        self.core.shutdown()
