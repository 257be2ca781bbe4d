"""The engine core: scheduler + model worker + the step loop thread.

``step()`` is three calls: ``scheduler.schedule()``, ``worker.execute(batch)``,
``scheduler.postprocess(output)``. The loop sleeps on a condition while there is
nothing to do. Outputs (token updates, rejections) go to one callback, called
with the core's lock held so that a sequence's outputs keep their order; the
callback must only hand them on (put them on a queue), never block.

Errors are kept apart: a bad or unlucky request is refused with a typed error
(SequenceRejected) while the others keep running; a dead worker fails every
sequence with EngineDead and the core stays DEAD.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable

from ..config import EngineConfig
from ..errors import EngineDead, EngineNotReady, InvalidRequest, ServingError
from ..adapters.messages import AdapterCommand, AdapterReply
from .model_executor import ModelExecutor, StepFailed
from ..protocol import (
    SessionCommand,
    SessionReply,
    AddSequence,
    EngineOutputs,
    EngineState,
    HealthReport,
    SequenceRejected,
)
from .adapter_control import AdapterControl
from .adapter_registry import AdapterRegistry
from .scheduler import Scheduler, SchedulerLimits
from ..grammar.compiler import GrammarCompiler, hf_llm_tokenizer

log = logging.getLogger(__name__)

OutputCallback = Callable[[EngineOutputs], None]


class EngineCore:
    def __init__(self, config: EngineConfig, on_outputs: OutputCallback, worker_target=None, engine_reason: str = ""):
        """``worker_target`` replaces the real model worker entry (tests use a fake); ``engine_reason``:
        why this engine was chosen (engine_choice.py), reported in the model's info."""
        self.config = config
        self._engine_reason = engine_reason
        self._executor = ModelExecutor(config, worker_target, on_dead=self._on_worker_dead)
        self._on_outputs = on_outputs
        self._cond = threading.Condition()
        self._scheduler: Scheduler | None = None  # created once the model is loaded
        self._adapters: AdapterControl | None = None  # likewise
        self._dead_detail: str | None = None
        self._thread = threading.Thread(target=self._run, name="engine-step-loop", daemon=True)

    def start(self) -> None:
        """Start the worker (it loads in the background) and the step loop."""
        self._executor.start()
        self._thread.start()

    # --- requests ----------------------------------------------------------------

    def add(self, request: AddSequence) -> None:
        """Queue a sequence; raises InvalidRequest, AdapterNotFound, QueueFull, EngineNotReady or EngineDead."""
        with self._cond:
            self._raise_unless_ready()
            adapter = self._adapters.resolve(request.adapter) if request.adapter else None
            self._scheduler.add(request, adapter)
            self._cond.notify()

    def control(self, command: AdapterCommand | SessionCommand, reply: Callable) -> None:
        """Adapters (register, remove, list) and sessions (open, close); ``reply`` gets the one
        AdapterReply / SessionReply, maybe later (a preload answers from the step loop)."""
        failed = AdapterReply if isinstance(command, AdapterCommand) else SessionReply
        with self._cond:
            try:
                self._raise_unless_ready()
                if isinstance(command, AdapterCommand):
                    self._adapters.handle(command, reply)
                else:
                    reply(self._session_command(command))
            except ServingError as exc:
                reply(failed(command.call_id, error_type=exc.error_type, message=exc.message))
                return
            self._cond.notify()

    def _session_command(self, command: SessionCommand) -> SessionReply:
        sessions = self._scheduler.sessions
        if command.action == "open":
            return SessionReply(command.call_id, sessions.open(), sessions.ttl_s)
        if command.action == "close":
            sessions.close(command.session_id)
            return SessionReply(command.call_id, command.session_id)
        raise InvalidRequest(f"unknown session action {command.action!r}")

    def abort(self, seq_id: str) -> None:
        """Idempotent; the sequence's final update (ABORT) goes to the callback."""
        with self._cond:
            if self._scheduler is None:
                return
            update = self._scheduler.abort(seq_id)
            if update is not None:
                self._on_outputs(EngineOutputs(updates=[update]))

    def health(self) -> HealthReport:
        with self._cond:
            state = self.state
            detail = self._dead_detail or self._executor.detail
            sched = self._scheduler
            info = self._executor.info
            if info is not None and self._engine_reason:
                info = dataclasses.replace(info, engine_reason=self._engine_reason)
            return HealthReport(
                state=state,
                detail=detail if state is not EngineState.READY else "ready",
                info=info,
                num_waiting=sched.num_waiting if sched else 0,
                num_running=sched.num_running if sched else 0,
                kv_cache=sched.kv_stats() if sched else None,
                lora=sched.lora_stats(len(self._adapters.registry)) if sched else None,
                spec_decode=sched.spec_stats() if sched else None,
            )

    def metrics_text(self) -> str:
        """Nothing: the front end exports our engine's figures from health()."""
        return ""

    @property
    def state(self) -> EngineState:
        if self._dead_detail is not None:
            return EngineState.DEAD
        if self._executor.state is EngineState.READY and self._scheduler is None:
            return EngineState.LOADING  # the loop is about to build the scheduler
        return self._executor.state

    def wait_ready(self, timeout_s: float | None = None) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self.state is not EngineState.LOADING, timeout_s):
                raise EngineNotReady(f"the model is still loading after {timeout_s} s")
            self._raise_unless_ready()

    def _raise_unless_ready(self) -> None:
        state = self.state
        if state is EngineState.DEAD:
            raise EngineDead(self._dead_detail or self._executor.detail)
        if state is EngineState.LOADING:
            raise EngineNotReady("the model is still loading")

    # --- the step loop --------------------------------------------------------------

    def _run(self) -> None:
        try:
            info = self._executor.wait_ready()
        except ServingError as exc:
            self._on_worker_dead(exc.message)
            return
        with self._cond:
            grammars = GrammarCompiler(hf_llm_tokenizer(info.model_path, info.vocab_size, info.eos_token_ids),
                                       on_ready=self._wake)
            scheduler = Scheduler(SchedulerLimits.from_config(self.config, info), grammars)
            self._adapters = AdapterControl(AdapterRegistry(self.config, info), scheduler)
            try:
                self._adapters.start(self.config.adapters_dir, self.config.adapters_optional)
            except ServingError as exc:  # a start-up adapter that cannot be served fails the start, as a model would
                self._on_worker_dead(exc.message)
                return
            self._scheduler = scheduler
            self._cond.notify_all()
        log.info("engine ready: %s (%s, %s)", info.model_path, info.device, info.dtype)
        while self._wait_for_work():
            try:
                self.step()
            except EngineDead as exc:
                self._on_worker_dead(exc.message)
                return
            except Exception:  # a bug here must not leave requests hanging forever
                log.exception("the step loop failed")
                self._on_worker_dead("internal error in the engine step loop")
                return

    def _wait_for_work(self) -> bool:
        with self._cond:
            self._cond.wait_for(lambda: self._dead_detail is not None or self._scheduler.has_work())
            return self._dead_detail is None

    def _wake(self) -> None:
        """A grammar finished compiling (called from its thread): its sequences may be admitted."""
        with self._cond:
            self._cond.notify_all()

    def step(self) -> None:
        """One batched step: schedule -> execute -> postprocess."""
        with self._cond:
            batch = self._scheduler.schedule()
            if batch is None:
                rejected = self._scheduler.drain_rejected()  # refused at admission (a grammar that fails)
                if rejected:
                    self._on_outputs(EngineOutputs(rejected=rejected))
                return
        try:
            output = self._executor.execute(batch)
        except StepFailed as exc:
            self._fail_step([c.seq_id for c in batch.chunks], exc)
            return
        with self._cond:
            updates = self._scheduler.postprocess(output)
            self._adapters.on_step(output)
            rejected = self._scheduler.drain_rejected()
            if updates or rejected:
                self._on_outputs(EngineOutputs(updates=updates, rejected=rejected))

    def _fail_step(self, seq_ids: list[str], exc: StepFailed) -> None:
        """The worker survived but this step failed: fail its sequences, keep the rest."""
        log.error("step failed for %d sequences: %s: %s", len(seq_ids), exc.error_type, exc.message)
        with self._cond:
            self._scheduler.fail(seq_ids)
            rejected = [SequenceRejected(s, exc.error_type, exc.message) for s in seq_ids]
            self._on_outputs(EngineOutputs(rejected=rejected))

    def _on_worker_dead(self, detail: str) -> None:
        with self._cond:
            if self._dead_detail is not None:
                return  # already dead, or shutting down
            self._dead_detail = detail
            if self._adapters is not None:
                self._adapters.fail_waiting(f"the engine died: {detail}")
            ids = self._scheduler.finish_all() if self._scheduler else []
            if ids:
                message = f"the engine died: {detail}"
                rejected = [SequenceRejected(s, EngineDead.error_type, message) for s in ids]
                self._on_outputs(EngineOutputs(rejected=rejected))
            self._cond.notify_all()

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Refuse new work, fail what is left, stop the worker and the loop."""
        with self._cond:
            if self._dead_detail is None:
                self._dead_detail = "the engine is shut down"
            if self._adapters is not None:
                self._adapters.fail_waiting("the engine is shutting down")
            ids = self._scheduler.finish_all() if self._scheduler else []
            if ids:
                rejected = [SequenceRejected(s, EngineDead.error_type, "the engine is shutting down") for s in ids]
                self._on_outputs(EngineOutputs(rejected=rejected))
            self._cond.notify_all()
        self._executor.shutdown(timeout_s)
        if self._scheduler is not None and self._scheduler.structured.compiler is not None:
            self._scheduler.structured.compiler.shutdown()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
