"""The engine core on vLLM (``LLM_BYOC_ENGINE=vllm``): EngineCore's methods over vLLM's ``LLMEngine``.

The engine server, its socket and the whole front end are the same as with our
engine; only this object differs. One thread (the step loop) owns vLLM's
engine: it loads it, hands it the sequences and aborts the other threads
queued, and calls ``step()``, which returns each running request's new tokens.
Outputs go to ``on_outputs`` with the lock held, in order, as EngineCore does.

What is checked here before vLLM sees a sequence, as our scheduler does: its
sampling fields, the prompt against the context window and the vocabulary, a
full queue (429), its adapter (404) and its session. vLLM refusing a request
anyway (a grammar it cannot compile, say) is that sequence's SequenceRejected.
vLLM failing as a whole (its engine process died) is EngineDead for every
sequence, and the state stays DEAD, so the engine server exits and ``serve`` with it.
The engine arguments it logs, and what it says of a failure (the log, /ping), go
through ``logging_setup``'s redaction: an ``hf_token`` or the like is never shown.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from ..adapters.messages import AdapterCommand, AdapterReply, AdapterSpec, AdapterStatus, LoRAStats
from ..config import ENV_VLLM_ENABLE_LORA, ConfigError, EngineConfig, hub_token
from ..errors import (
    EngineDead,
    EngineNotReady,
    InvalidRequest,
    QueueFull,
    ServingError,
    SessionNotFound,
)
from ..protocol import (
    AddSequence,
    EngineOutputs,
    EngineState,
    FinishReason,
    HealthReport,
    KVCacheStats,
    ModelInfo,
    SequenceRejected,
    SequenceUpdate,
    SessionCommand,
    SessionReply,
)
from ..memory import available_memory, cgroup_memory_limit
from ..metrics import families
from ..logging_setup import format_args, scrub, secret_values
from . import vllm_mapping
from .adapter_registry import AdapterRegistry

log = logging.getLogger(__name__)

OutputCallback = Callable[[EngineOutputs], None]


class SchedulerFigures:
    """The latest of vLLM's scheduler figures, as its stat loggers receive them after each step
    (``stats_logger_class``): queue lengths and the KV cache's block use, and the prefix-cache
    and preemption counts added up since start. What ``/ping`` and ``/metrics`` report with vLLM.
    vLLM's engine process can send a step's figures after that step's tokens, so right after a
    response they may trail it by one step (3 of 12 back-to-back responses here)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.running = self.waiting = 0
        self.kv_usage = 0.0  # blocks held by running requests over all blocks (vLLM's kv_cache_usage)
        self.prefix_queried = self.prefix_hits = self.preemptions = 0

    def record(self, scheduler_stats, iteration_stats) -> None:
        with self._lock:
            if scheduler_stats is not None:
                self.running, self.waiting = scheduler_stats.num_running_reqs, scheduler_stats.num_waiting_reqs
                self.kv_usage = scheduler_stats.kv_cache_usage
                prefix = scheduler_stats.prefix_cache_stats
                if prefix is not None:  # vLLM's counts since its last step
                    self.prefix_queried += prefix.queries
                    self.prefix_hits += prefix.hits
            if iteration_stats is not None:
                self.preemptions += iteration_stats.num_preempted_reqs

    def kv_stats(self, block_size: int, blocks_total: int, idle: bool) -> KVCacheStats:
        """In our KVCacheStats: vLLM counts whole blocks (tokens_used is blocks x block size) and does
        not report cached blocks (0); an idle engine holds none."""
        with self._lock:
            used = 0 if idle else min(blocks_total, round(self.kv_usage * blocks_total))
            return KVCacheStats(block_size, blocks_total, used, 0, used * block_size,
                                self.prefix_queried, self.prefix_hits, self.preemptions)


def stats_logger_class(figures: SchedulerFigures):
    """A vLLM stat logger (its documented extension point) that hands each step's stats to ``figures``."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class FiguresLogger(StatLoggerBase):
        def __init__(self, vllm_config, engine_index: int = 0):
            pass

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0):
            figures.record(scheduler_stats, iteration_stats)

        def log_engine_initialized(self):
            pass

    return FiguresLogger


@dataclass
class _Live:
    num_prompt_tokens: int
    logprobs: bool
    top_logprobs: int
    adapter: str
    lora: object = None  # vllm.lora.request.LoRARequest
    prompt_logprobs: int | None = None  # asked for the prompt's log-probabilities (this many alternatives)


class VllmCore:
    def __init__(self, config: EngineConfig, on_outputs: OutputCallback, engine_reason: str = ""):
        self.config = config
        self._on_outputs = on_outputs
        self._engine_reason = engine_reason
        self._cond = threading.Condition()
        self._engine = None  # vllm LLMEngine, once loaded (the step loop's alone)
        self._figures = SchedulerFigures()
        self._kv_blocks = 0  # blocks in vLLM's KV cache, once loaded
        self._info: ModelInfo | None = None
        self._dead_detail: str | None = None
        self._adds: list[tuple[AddSequence, object, object]] = []  # (request, vllm params, LoRARequest)
        self._aborts: list[str] = []
        self._live: dict[str, _Live] = {}
        self._busy = False  # vLLM has unfinished requests
        self._adapters: AdapterRegistry | None = None  # once the model is loaded (it needs the base's shapes)
        self._adapter_requests: Counter[str] = Counter()
        self._lora = vllm_mapping.lora_enabled(config)
        self._sessions: dict[str, float] = {}  # session id -> last used (monotonic)
        self._thread = threading.Thread(target=self._run, name="vllm-step-loop", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # --- requests ----------------------------------------------------------------

    def add(self, request: AddSequence) -> None:
        with self._cond:
            self._raise_unless_ready()
            info = self._info
            params = request.params.validate(self.config.max_new_tokens_limit)
            request.check_prompt(info.max_model_len, info.vocab_size)
            ids = request.prompt_token_ids
            if request.seq_id in self._live:
                raise InvalidRequest(f"sequence {request.seq_id!r} is already in the engine")
            if len(self._live) >= info.max_num_seqs + self.config.max_waiting:
                raise QueueFull(f"the engine queue is full ({len(self._live)} sequences in it); retry later")
            lora = None
            if request.adapter:
                lora = _lora_request(self._adapters.resolve(request.adapter))
                self._adapter_requests[request.adapter] += 1
            if request.session_id:
                self._touch_session(request.session_id)
            max_tokens = min(params.max_new_tokens, info.max_model_len - len(ids))
            try:
                vllm_params = vllm_mapping.sampling_params(params, max_tokens)
            except (ValueError, TypeError) as exc:
                raise InvalidRequest(f"vLLM refused the sampling parameters: {exc}") from None
            self._live[request.seq_id] = _Live(len(ids), params.logprobs, params.top_logprobs, request.adapter, lora,
                                                params.prompt_logprobs)
            self._adds.append((request, vllm_params, lora))
            self._cond.notify()

    def abort(self, seq_id: str) -> None:
        with self._cond:
            live = self._live.pop(seq_id, None)
            if live is None:
                return
            self._aborts.append(seq_id)
            self._on_outputs(EngineOutputs(updates=[SequenceUpdate(seq_id, [], None, FinishReason.ABORT,
                                                                   live.num_prompt_tokens)]))
            self._cond.notify()

    def control(self, command: AdapterCommand | SessionCommand, reply: Callable) -> None:
        failed = AdapterReply if isinstance(command, AdapterCommand) else SessionReply
        with self._cond:
            try:
                self._raise_unless_ready()
                if isinstance(command, AdapterCommand):
                    reply(self._adapter_command(command))
                else:
                    reply(self._session_command(command))
            except ServingError as exc:
                reply(failed(command.call_id, error_type=exc.error_type, message=exc.message))

    # --- adapters: checked as our engine checks them, served as vLLM LoRA requests ------------

    def _adapter_command(self, command: AdapterCommand) -> AdapterReply:
        registry = self._adapters
        if command.action == "list":
            return AdapterReply(command.call_id, [self._status(spec) for spec in registry.specs()])
        if command.action == "register":
            if not self._lora:
                raise InvalidRequest(f"LoRA adapters are off in this vLLM engine ({ENV_VLLM_ENABLE_LORA}="
                                     f"{self.config.vllm_enable_lora}; auto turns them on only when "
                                     f"{self.config.adapters_dir} holds adapters at start-up): start it with "
                                     f"{ENV_VLLM_ENABLE_LORA}=true to register adapters")
            return AdapterReply(command.call_id, [self._status(registry.register(command.name, command.src))])
        if command.action == "unregister":
            spec = registry.unregister(command.name)
            return AdapterReply(command.call_id, [AdapterStatus(spec.name, spec.rank, list(spec.target_modules),
                                                                spec.path, "unregistered")])
        raise InvalidRequest(f"unknown adapter action {command.action!r}")

    def _status(self, spec: AdapterSpec) -> AdapterStatus:
        active = any(live.adapter == spec.name for live in self._live.values())
        return AdapterStatus(spec.name, spec.rank, list(spec.target_modules), spec.path,
                             "active" if active else "registered", self._adapter_requests[spec.name])

    # --- sessions: vLLM's prefix cache keeps what it can; nothing is pinned ---------------------

    def _session_command(self, command: SessionCommand) -> SessionReply:
        self._expire_sessions()
        if command.action == "open":
            session_id = uuid.uuid4().hex
            self._sessions[session_id] = time.monotonic()
            return SessionReply(command.call_id, session_id, float(self.config.session_ttl_s))
        if command.action == "close":
            if self._sessions.pop(command.session_id, None) is None:
                raise SessionNotFound(f"session {command.session_id!r} is not open (closed or expired)")
            return SessionReply(command.call_id, command.session_id)
        raise InvalidRequest(f"unknown session action {command.action!r}")

    def _touch_session(self, session_id: str) -> None:
        self._expire_sessions()
        if session_id not in self._sessions:
            raise SessionNotFound(f"session {session_id!r} is not open (closed or expired)")
        self._sessions[session_id] = time.monotonic()

    def _expire_sessions(self) -> None:
        cutoff = time.monotonic() - self.config.session_ttl_s
        for session_id in [s for s, used in self._sessions.items() if used < cutoff]:
            del self._sessions[session_id]

    # --- state ----------------------------------------------------------------------

    def health(self) -> HealthReport:
        """Queue lengths from vLLM's scheduler (a sequence not yet handed to vLLM is waiting), its KV
        cache in our KVCacheStats (SchedulerFigures.kv_stats)."""
        with self._cond:
            state = self.state
            running = min(self._figures.running, len(self._live))
            lora = kv = None
            if self._info is not None:
                active = sorted({live.adapter for live in self._live.values() if live.adapter})
                lora = LoRAStats(self.config.max_loras, self.config.max_cpu_loras, len(self._adapters or ()), 0,
                                 active, active, [])
                kv = self._figures.kv_stats(self._info.kv_block_size, self._kv_blocks,
                                            idle=not self._live and not self._busy)
            detail = {EngineState.READY: "ready", EngineState.DEAD: self._dead_detail,
                      EngineState.LOADING: "loading the model into vLLM"}[state]
            return HealthReport(state=state, detail=detail or "", info=self._info,
                                num_waiting=len(self._live) - running, num_running=running, kv_cache=kv, lora=lora)

    def metrics_text(self) -> str:
        """vLLM's own ``vllm:*`` series (its Prometheus stat logger writes them to this process's
        default registry), for the front end's ``/metrics``."""
        from prometheus_client import REGISTRY, generate_latest

        return "".join(block for name, block in families(generate_latest(REGISTRY).decode())
                       if name.startswith("vllm:"))

    @property
    def state(self) -> EngineState:
        if self._dead_detail is not None:
            return EngineState.DEAD
        return EngineState.READY if self._info is not None else EngineState.LOADING

    def wait_ready(self, timeout_s: float | None = None) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self.state is not EngineState.LOADING, timeout_s):
                raise EngineNotReady(f"the model is still loading after {timeout_s} s")
            self._raise_unless_ready()

    def _raise_unless_ready(self) -> None:
        state = self.state
        if state is EngineState.DEAD:
            raise EngineDead(self._dead_detail)
        if state is EngineState.LOADING:
            raise EngineNotReady("the model is still loading")

    # --- the step loop --------------------------------------------------------------

    def _run(self) -> None:
        try:
            engine, info = _load(self.config, self._engine_reason, self._lora, self._figures)
        except Exception as exc:  # one clear line; the server then exits non-zero
            if isinstance(exc, ServingError):
                detail = exc.message
            else:
                detail = str(exc) if isinstance(exc, ConfigError) else _one_line(exc)
            detail = self._redacted(detail)
            log.error("vLLM could not load the model: %s", detail)
            self._die(f"vLLM could not load the model: {detail}")
            return
        with self._cond:
            self._engine, self._adapters = engine, AdapterRegistry(self.config, info)
            self._kv_blocks = engine.vllm_config.cache_config.num_gpu_blocks or 0
            try:
                self._adapters.register_folder(self.config.adapters_dir, self.config.adapters_optional)
            except ServingError as exc:
                self._die(exc.message)
                return
            self._info = info
            self._cond.notify_all()
        log.info("engine ready: %s on vLLM (%s, %s)", info.model_path, info.device, info.dtype)
        try:
            while self._loop_once(engine):
                pass
        except Exception as exc:  # vLLM's engine is gone (EngineDeadError) or broke: every sequence fails
            log.exception("vLLM's engine failed")
            self._die(self._redacted(f"vLLM's engine failed: {type(exc).__name__}: {exc}"))

    def _redacted(self, text: str) -> str:
        """vLLM's words for the log and /ping, with the secrets it was given (an ``hf_token`` engine argument,
        the hub token) and the credentials of URLs masked."""
        return scrub(text, [*secret_values(self.config.vllm_args), hub_token()])

    def _loop_once(self, engine) -> bool:
        with self._cond:
            self._cond.wait_for(lambda: self._dead_detail is not None or self._adds or self._aborts or self._busy)
            if self._dead_detail is not None:
                return False
            adds, self._adds = self._adds, []
            aborts, self._aborts = self._aborts, []
        rejected = []
        for request, params, lora in adds:
            try:
                engine.add_request(request.seq_id, {"prompt_token_ids": list(request.prompt_token_ids)}, params,
                                   lora_request=lora)
            except (ValueError, TypeError) as exc:  # vLLM refused this one request
                rejected.append(SequenceRejected(request.seq_id, InvalidRequest.error_type, str(exc)))
        if aborts:
            engine.abort_request(aborts)
        outputs = engine.step() if engine.has_unfinished_requests() else []
        with self._cond:
            self._busy = engine.has_unfinished_requests()
            updates = []
            for output in outputs:
                live = self._live.get(output.request_id)
                if live is None:
                    continue  # aborted meanwhile: its ABORT update has gone out
                update = vllm_mapping.sequence_update(output.request_id, output, live.num_prompt_tokens,
                                                      live.logprobs, live.top_logprobs, live.prompt_logprobs)
                if update.finish_reason is not None:
                    del self._live[output.request_id]
                updates.append(update)
            for r in rejected:
                self._live.pop(r.seq_id, None)
            if updates or rejected:
                self._on_outputs(EngineOutputs(updates=updates, rejected=rejected))
        return True

    def _die(self, detail: str) -> None:
        with self._cond:
            if self._dead_detail is not None:
                return
            self._dead_detail = detail
            ids, self._live = list(self._live), {}
            self._adds, self._aborts = [], []
            if ids:
                self._on_outputs(EngineOutputs(rejected=[SequenceRejected(s, EngineDead.error_type,
                                                                          f"the engine died: {detail}") for s in ids]))
            self._cond.notify_all()

    def shutdown(self, timeout_s: float = 10.0) -> None:
        with self._cond:
            live = bool(self._live)
        if live:
            log.info("shutting vLLM down with sequences still running")
        self._die("the engine is shut down")
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.engine_core.shutdown()


def _one_line(exc: Exception) -> str:
    """vLLM's refusal in one log line: a pydantic ValidationError (a VllmConfig vLLM refuses) by its
    messages alone, anything else by its type and first line."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            return "vLLM refused the configuration: " + "; ".join(str(e.get("msg", e)) for e in errors())
        except Exception:  # not pydantic's errors() after all
            pass
    first = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {first[0] if first else ''}"


def _lora_request(spec: AdapterSpec):
    """vLLM's request for a registered adapter; its int id is the registration's number (uid "name#n"),
    so a name registered again is another adapter to vLLM too."""
    from vllm.lora.request import LoRARequest

    return LoRARequest(spec.name, int(spec.uid.rsplit("#", 1)[1]), spec.path)


def _load(config: EngineConfig, reason: str, enable_lora: bool, figures: SchedulerFigures):
    """vLLM's engine for the configured model and its ModelInfo (with what adapters may target);
    its scheduler's figures go to ``figures`` after each step."""
    import torch
    import vllm
    from transformers import CONFIG_MAPPING
    from vllm.platforms import current_platform

    from ..models.footprint import read_footprint
    from ..models.loader import check_readable, local_folder, read_model_config, resolve_dtype
    from ..worker.kv_sizing import cpu_kv_budget
    from ..worker.loading import eos_token_ids, model_max_len, read_generation_eos

    started = time.monotonic()
    folder = local_folder(config.model)
    check_readable(folder)
    raw = read_model_config(folder)
    vllm_mapping.check_folder_for_vllm(folder, raw, config.trust_remote_code, CONFIG_MAPPING)
    vllm_mapping.check_platform(current_platform.device_type, vllm.__version__)
    device = torch.device("cuda" if torch.cuda.is_available() and config.device != "cpu" else "cpu")
    dtype = str(resolve_dtype(config.dtype, device)).removeprefix("torch.")
    max_len = model_max_len(_AttrDict(raw), config.max_model_len)
    kv_bytes = None
    if device.type == "cpu":
        kv_bytes, how = cpu_kv_budget(config.kv_cache_memory, cgroup_memory_limit(), available_memory())
        log.info("vLLM KV cache on CPU: %.2f GiB (%s)", kv_bytes / 1024**3, how)
    gpu_bytes = torch.cuda.get_device_properties(0).total_memory if device.type == "cuda" else 0
    facts = vllm_mapping.DeviceFacts(device.type, vllm_mapping.visible_gpus(), kv_bytes, gpu_bytes)
    args = vllm_mapping.engine_args(config, folder, dtype, max_len, facts, enable_lora)
    footprint = read_footprint(folder, getattr(torch, dtype).itemsize, max_len)
    vllm_mapping.check_fits(footprint, facts, args["tensor_parallel_size"] * args["pipeline_parallel_size"], config)
    vllm_mapping.omp_threads_default(config)
    log.info("starting vLLM: %s", format_args(args))

    from vllm import EngineArgs
    from vllm.v1.engine.llm_engine import LLMEngine

    engine = LLMEngine.from_engine_args(EngineArgs(**args), stat_loggers=[stats_logger_class(figures)])
    vllm_config = engine.vllm_config
    model_config = vllm_config.model_config
    eos = eos_token_ids(read_generation_eos(folder), raw.get("eos_token_id"))
    info = ModelInfo(
        model_type=raw.get("model_type", ""),
        model_path=str(folder),
        vocab_size=model_config.get_vocab_size(),
        max_model_len=model_config.max_model_len,
        eos_token_ids=eos,
        device=device.type,
        dtype=str(model_config.dtype).removeprefix("torch."),
        max_num_seqs=vllm_config.scheduler_config.max_num_seqs,
        load_time_s=round(time.monotonic() - started, 3),
        kv_block_size=vllm_config.cache_config.block_size or 16,
        num_layers=int(raw.get("num_hidden_layers") or 0),
        linear_backend="vllm",
        lora_modules={name: list(features) for name, features in _lora_modules(raw).items()},
        engine="vllm",
        engine_reason=reason,
    )
    log.info("loaded %s on vLLM (%s, %s on %s, tensor parallel %d) in %.1f s", folder, info.model_type,
             info.dtype, info.device, args["tensor_parallel_size"], info.load_time_s)
    return engine, info


class _AttrDict(dict):
    def __getattr__(self, name):
        return self.get(name)


def _lora_modules(raw: dict) -> dict[str, tuple[int, int]]:
    """The projections a LoRA adapter may target, (in, out) features, from config.json (the Llama-style
    layout vLLM serves); what AdapterRegistry checks an adapter's tensors against, as for our engine."""
    hidden = int(raw.get("hidden_size") or 0)
    heads = int(raw.get("num_attention_heads") or 0)
    if not hidden or not heads:
        return {}
    head_dim = int(raw.get("head_dim") or hidden // heads)
    kv = int(raw.get("num_key_value_heads") or heads) * head_dim
    inter = int(raw.get("intermediate_size") or 0)
    modules = {"q_proj": (hidden, heads * head_dim), "k_proj": (hidden, kv), "v_proj": (hidden, kv),
               "o_proj": (heads * head_dim, hidden)}
    if inter:
        modules.update(gate_proj=(hidden, inter), up_proj=(hidden, inter), down_proj=(inter, hidden))
    return modules
