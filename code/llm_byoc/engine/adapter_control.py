"""POST / GET / DELETE /adapters as the engine core carries them out.

Called with the core's lock held; every command gets exactly one reply
(``AdapterReply``, matched to its call id), at once or, for a registration
with ``preload``, once the worker has loaded the weights (or failed to). A
removed adapter stays in the worker until no queued or running sequence uses
it, so requests already accepted finish on it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..adapters.messages import AdapterCommand, AdapterReply, AdapterSpec, AdapterStatus
from ..errors import EngineDead, InvalidRequest, ModelLoadError, ServingError
from ..protocol import StepOutput
from .adapter_registry import AdapterRegistry
from .scheduler import Scheduler

log = logging.getLogger(__name__)

Reply = Callable[[AdapterReply], None]


class AdapterControl:
    def __init__(self, registry: AdapterRegistry, scheduler: Scheduler):
        self.registry = registry
        self.scheduler = scheduler
        self._waiting: dict[str, list[tuple[int, Reply]]] = {}  # uid -> preloads waiting for the worker

    def start(self, folder: str, optional: bool = False) -> None:
        """Register the adapters under ``folder``; load as many as the worker keeps in memory.

        ModelLoadError when one cannot be registered, unless ``optional`` (see ``register_folder``)."""
        for spec in self.registry.register_folder(folder, optional)[: self.scheduler.adapters.max_cpu_loras]:
            self.scheduler.adapters.preload(spec)

    def resolve(self, name: str) -> AdapterSpec:
        return self.registry.resolve(name)

    def handle(self, command: AdapterCommand, reply: Reply) -> None:
        try:
            if command.action == "list":
                reply(AdapterReply(command.call_id, self.statuses()))
            elif command.action == "register":
                self._register(command, reply)
            elif command.action == "unregister":
                spec = self.registry.unregister(command.name)
                self.scheduler.retire_adapter(spec.uid)
                gone = AdapterStatus(spec.name, spec.rank, list(spec.target_modules), spec.path, "unregistered")
                reply(AdapterReply(command.call_id, [gone]))
            else:
                raise InvalidRequest(f"unknown adapter action {command.action!r}")
        except ServingError as exc:
            reply(AdapterReply(command.call_id, error_type=exc.error_type, message=exc.message))

    def _register(self, command: AdapterCommand, reply: Reply) -> None:
        spec = self.registry.register(command.name, command.src)
        if not command.preload:
            reply(AdapterReply(command.call_id, self.statuses([spec.name])))
            return
        self.scheduler.adapters.preload(spec)
        self._waiting.setdefault(spec.uid, []).append((command.call_id, reply))

    def on_step(self, output: StepOutput) -> None:
        """The worker's load results: record them, answer the preloads that waited for them."""
        for result in output.adapter_results:
            self.registry.on_load(result.uid, result.ok, result.message, result.seconds, result.bytes)
            for call_id, reply in self._waiting.pop(result.uid, []):
                name = result.uid.rsplit("#", 1)[0]
                try:
                    if not result.ok:
                        raise ModelLoadError(f"adapter {name!r} failed to load: {result.message}")
                    reply(AdapterReply(call_id, self.statuses([name])))
                except ServingError as exc:  # failed, or unregistered while it loaded
                    reply(AdapterReply(call_id, error_type=exc.error_type, message=exc.message))

    def fail_waiting(self, detail: str) -> None:
        """The engine is gone: every preload still waiting gets EngineDead."""
        waiting, self._waiting = self._waiting, {}
        for replies in waiting.values():
            for call_id, reply in replies:
                reply(AdapterReply(call_id, error_type=EngineDead.error_type, message=detail))

    def statuses(self, names: list[str] | None = None) -> list[AdapterStatus]:
        s = self.scheduler
        return self.registry.statuses(s.adapters, s.adapter_requests, s.adapter_tokens, names)
