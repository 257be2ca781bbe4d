"""The front API of the engine: submit prompts, stream tokens, abort.

``LLMEngine.start(config)`` runs the engine core in this process (a step loop
thread + the model worker process); ``LLMEngine.connect(socket_path)`` talks to
an engine server process (``python -m llm_byoc.engine.server``), connecting in
the background (LOADING until it answers). Both look the same to callers: a
``seam.ServingEngine``. Health says LOADING until the model is loaded and the
tokenizer too, in this process, so the first request does not pay for it. The
front end tokenizes, maps prompt i of a request to
sequence ``{request_id}-{i}``, routes the core's outputs to per-request
queues, detokenizes and applies stop strings. It is thread-safe: many HTTP
threads submit and stream at once.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
import uuid
from typing import Any

from ..adapters.messages import AdapterCommand, AdapterStatus
from ..config import EngineConfig
from ..errors import EngineDead, EngineNotReady, InvalidRequest, ServingError
from ..protocol import (
    AddSequence,
    EngineOutputs,
    EngineState,
    HealthReport,
    ModelInfo,
    SamplingParams,
    SequenceRejected,
    SessionCommand,
)
from .core_client import CoreClient, InProcessCore
from .remote_core import RemoteCore
from .outputs import GenerationResult
from .request import PromptStream, RequestHandle
from .seam import Prompts

__all__ = ["LLMEngine", "RequestHandle"]

log = logging.getLogger(__name__)

ADAPTER_TIMEOUT_S = 120.0  # a preload reads the adapter's weights
METRICS_TIMEOUT_S = 5.0  # a /metrics scrape waits this long for the engine's own series


class LLMEngine:
    """Our engine behind the seam (``seam.ServingEngine``)."""

    def __init__(self, make_core, tokenizer: Any = None, trust_remote_code: bool = False, max_input_tokens: int = 0):
        """Use ``start`` or ``connect``. ``make_core(on_outputs, on_lost)`` builds the CoreClient;
        ``max_input_tokens``: a longer prompt is refused (LLM_BYOC_MAX_INPUT_TOKENS; 0: the context decides)."""
        self.max_input_tokens = max_input_tokens
        self._routes: dict[str, RequestHandle] = {}
        self._routes_lock = threading.Lock()
        self._tokenizer = tokenizer
        self._tokenizer_lock = threading.Lock()
        self._warming = False  # a background load of the tokenizer has started
        self._tokenizer_failed = ""
        self._trust_remote_code = trust_remote_code
        self._info: ModelInfo | None = None
        self._call_ids = itertools.count(1)
        self._core: CoreClient = make_core(self._route, self._lost)

    @classmethod
    def start(cls, config: EngineConfig, worker_target=None, tokenizer: Any = None) -> LLMEngine:
        """An in-process engine core; returns at once while the model loads."""
        engine = cls(lambda on_outputs, _on_lost: InProcessCore(config, on_outputs, worker_target),
                     tokenizer, config.trust_remote_code, config.max_input_tokens)
        engine._core.start()
        return engine

    @classmethod
    def connect(cls, socket_path: str, timeout_s: float | None = 30.0, tokenizer: Any = None,
                trust_remote_code: bool = False, health_timeout_s: float | None = None,
                max_input_tokens: int = 0) -> LLMEngine:
        """The front end of an engine server; returns at once. ``timeout_s``: how long to keep
        trying to reach its socket (None: for ever); ``health_timeout_s``: how long a health
        check may wait for the engine (None: the client's default)."""
        options = {} if health_timeout_s is None else {"health_timeout_s": health_timeout_s}
        engine = cls(lambda on_outputs, on_lost: RemoteCore(socket_path, on_outputs, on_lost, timeout_s, **options),
                     tokenizer, trust_remote_code, max_input_tokens)
        if tokenizer is None:  # load it the moment the model is: /ping is READY no later than the engine
            engine._warming = True
            threading.Thread(target=engine._warm, args=(True,), name="tokenizer-warm", daemon=True).start()
        return engine

    # --- state -------------------------------------------------------------------

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Block until the model is loaded; raises EngineDead or EngineNotReady."""
        self._core.wait_ready(timeout_s)
        self._load_tokenizer()

    def health(self, timeout_s: float | None = None) -> HealthReport:
        """``timeout_s``: how long an engine server may take to answer (None: the client's default).
        READY once the tokenizer is loaded too (in the background: from ``connect``, or from here)."""
        report = self._core.health(timeout_s)
        if report.state is EngineState.READY and self._tokenizer is None:
            if self._tokenizer_failed:
                return dataclasses.replace(report, state=EngineState.DEAD, detail=self._tokenizer_failed)
            if not self._warming:  # a second thread starting it too would only wait for the first
                self._warming = True
                threading.Thread(target=self._warm, name="tokenizer-warm", daemon=True).start()
            return dataclasses.replace(report, state=EngineState.LOADING, detail="loading the tokenizer")
        return report

    def engine_metrics(self, timeout_s: float = METRICS_TIMEOUT_S) -> str:
        """The engine's own Prometheus series for ``/metrics`` (vLLM's ``vllm:*``; "" with ours)."""
        return self._core.engine_metrics(timeout_s)

    def _warm(self, when_ready: bool = False) -> None:
        if when_ready:
            try:
                self._core.wait_ready(None)
            except ServingError:
                return  # the engine is dead: health says so
        try:
            self._load_tokenizer()
        except Exception as exc:  # the model cannot be served: /ping says why
            log.exception("loading the tokenizer failed")
            self._tokenizer_failed = f"loading the tokenizer failed: {exc}"

    @property
    def tokenizer(self) -> Any:
        return self._load_tokenizer()

    @property
    def max_model_len(self) -> int:
        return self._ready_info().max_model_len

    def _ready_info(self) -> ModelInfo:
        """The loaded model's info (cached: it never changes); raises when not ready."""
        if self._info is None:
            report = self._core.health()
            if report.state is EngineState.DEAD:
                raise EngineDead(report.detail or "the engine is dead")
            if report.state is not EngineState.READY or report.info is None:
                raise EngineNotReady(report.detail or "the model is still loading")
            self._info = report.info
        return self._info

    def _load_tokenizer(self) -> Any:
        with self._tokenizer_lock:
            if self._tokenizer is None:
                from ..models.fast_tokenizer import load_tokenizer  # no torch in the front end

                path = self._ready_info().model_path
                self._tokenizer = load_tokenizer(path, trust_remote_code=self._trust_remote_code)
            return self._tokenizer

    # --- requests ----------------------------------------------------------------

    def submit(self, prompts: Prompts, params: SamplingParams | list[SamplingParams], request_id: str | None = None,
               adapter: str | None = None, session_id: str | None = None) -> RequestHandle:
        """Queue every prompt of a request (on a registered LoRA ``adapter``, or the base model);
        ``params``: one for all prompts, or one per prompt. Raises InvalidRequest, EngineNotReady or
        EngineDead (then nothing of the request stays queued). The engine's refusal of a sequence
        (QueueFull, AdapterNotFound, too many new tokens) is raised here (in process) or by the
        handle's first event (engine server): callers handle both."""
        info = self._ready_info()
        tokenizer = self._load_tokenizer()
        prompt_ids = [self._prompt_ids(p, tokenizer, info.max_model_len) for p in _as_prompt_list(prompts)]
        longest = max(len(ids) for ids in prompt_ids)
        if self.max_input_tokens and longest > self.max_input_tokens:
            raise InvalidRequest(f"a prompt has {longest} tokens; this server takes at most {self.max_input_tokens} "
                                 "(LLM_BYOC_MAX_INPUT_TOKENS)")
        per_prompt = per_prompt_params(params, len(prompt_ids))
        request_id = request_id or uuid.uuid4().hex
        streams = [
            PromptStream(i, f"{request_id}-{i}", ids, tokenizer, p)
            for i, (ids, p) in enumerate(zip(prompt_ids, per_prompt))
        ]
        handle = RequestHandle(request_id, streams, self._release)
        with self._routes_lock:
            if any(s.seq_id in self._routes for s in streams):
                raise InvalidRequest(f"request id {request_id!r} is already in use")
            self._routes.update({s.seq_id: handle for s in streams})
        adds = [AddSequence(s.seq_id, ids, p, adapter or "", session_id or "")
                for s, ids, p in zip(streams, prompt_ids, per_prompt)]
        try:
            self._core.add(adds)
        except BaseException:
            self._release(handle.seq_ids)
            raise
        return handle

    def generate(self, prompts: Prompts, params: SamplingParams, timeout_s: float | None = None,
                 adapter: str | None = None) -> list[GenerationResult]:
        return self.submit(prompts, params, adapter=adapter).result(timeout_s)

    # --- adapters ------------------------------------------------------------------

    def register_adapter(self, name: str, src: str, preload: bool = False,
                         timeout_s: float = ADAPTER_TIMEOUT_S) -> list[AdapterStatus]:
        """Check and register a PEFT LoRA folder (``preload``: also load its weights first)."""
        return self._adapter_command("register", timeout_s, name=name, src=src, preload=preload)

    def unregister_adapter(self, name: str) -> list[AdapterStatus]:
        return self._adapter_command("unregister", ADAPTER_TIMEOUT_S, name=name)

    def list_adapters(self) -> list[AdapterStatus]:
        return self._adapter_command("list", ADAPTER_TIMEOUT_S)

    def _adapter_command(self, action: str, timeout_s: float, **fields: Any) -> list[AdapterStatus]:
        return self._control(AdapterCommand(next(self._call_ids), action, **fields), timeout_s).adapters

    # --- stateful sessions ---------------------------------------------------------

    def open_session(self) -> tuple[str, float]:
        """A new session: (its id, the seconds of idleness after which it closes)."""
        reply = self._control(SessionCommand(next(self._call_ids), "open"), ADAPTER_TIMEOUT_S)
        return reply.session_id, reply.ttl_s

    def close_session(self, session_id: str) -> None:
        self._control(SessionCommand(next(self._call_ids), "close", session_id), ADAPTER_TIMEOUT_S)

    def _control(self, command, timeout_s: float):
        self._ready_info()
        reply = self._core.control(command, timeout_s)
        if reply.error_type:
            raise ServingError.from_wire(reply.error_type, reply.message)
        return reply

    @staticmethod
    def _prompt_ids(prompt: Any, tokenizer: Any, max_model_len: int) -> list[int]:
        if isinstance(prompt, str):
            ids = list(tokenizer.encode(prompt))
        elif isinstance(prompt, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            ids = list(prompt)
        else:
            raise InvalidRequest("each prompt must be a string or a list of token ids")
        if not ids:
            raise InvalidRequest("a prompt is empty")
        if len(ids) + 1 > max_model_len:
            raise InvalidRequest(
                f"a prompt has {len(ids)} tokens; the context window is {max_model_len} tokens "
                "(prompt + at least 1 new token)"
            )
        return ids

    def _route(self, outputs: EngineOutputs) -> None:
        """Core outputs -> the handles that own the sequences (must not block)."""
        with self._routes_lock:
            for update in outputs.updates:
                handle = self._routes.get(update.seq_id)
                if update.finish_reason is not None:
                    self._routes.pop(update.seq_id, None)
                if handle is not None:
                    handle.deliver(update)
            for rejected in outputs.rejected:
                handle = self._routes.pop(rejected.seq_id, None)
                if handle is not None:
                    handle.deliver(rejected)

    def _lost(self, detail: str) -> None:
        """The engine server is gone: every routed sequence fails with EngineDead."""
        with self._routes_lock:
            seq_ids = list(self._routes)
        self._route(EngineOutputs(rejected=[SequenceRejected(s, EngineDead.error_type, detail) for s in seq_ids]))

    def _release(self, seq_ids: list[str]) -> None:
        """Stop routing these sequences and abort them in the core (idempotent)."""
        with self._routes_lock:
            live = [s for s in seq_ids if self._routes.pop(s, None) is not None]
        if live:
            try:
                self._core.abort(live)
            except ServingError:
                pass  # the engine is gone: nothing left to abort

    def shutdown(self) -> None:
        self._core.shutdown()


def per_prompt_params(params: SamplingParams | list[SamplingParams], num_prompts: int) -> list[SamplingParams]:
    if isinstance(params, SamplingParams):
        return [params] * num_prompts
    if len(params) != num_prompts:
        raise InvalidRequest(f"{len(params)} sampling parameter sets for {num_prompts} prompts")
    return list(params)


def _as_prompt_list(prompts: Any) -> list:
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, (list, tuple)) or not prompts:
        raise InvalidRequest("prompts must be a non-empty list of strings or of token id lists")
    return list(prompts)
