"""Typed messages that cross a process boundary, and their wire codec.

Two boundaries use them:
  front end (HTTP worker) <-> engine core (scheduler + step loop)
  engine core (executor)  <-> model worker (weights + KV cache)

Only plain data crosses: ids, ints, floats, strings, enums and the small
frozen dataclasses below. ``encode``/``decode`` turn a message into JSON bytes
and back, rebuilding only the classes registered here, so a peer never makes
us unpickle (and so execute) anything. A prompt's token ids cross once; after
that only new token ids travel, keyed by sequence id.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any

from .adapters.messages import (
    AdapterActivation,
    AdapterCommand,
    AdapterLoadResult,
    AdapterReply,
    AdapterSpec,
    AdapterStatus,
    LoRAStats,
)
from .errors import InvalidRequest
from .wire import MessageCodec


class FinishReason(str, enum.Enum):
    STOP = "stop"  # EOS token or a stop string
    LENGTH = "length"  # max_new_tokens or the context window
    ABORT = "abort"  # the client went away or cancelled
    ERROR = "error"  # the engine failed this sequence


class EngineState(str, enum.Enum):
    LOADING = "loading"
    READY = "ready"
    DEAD = "dead"


GRAMMAR_KINDS = ("json_schema", "json_object", "regex", "lark")


@dataclass(frozen=True)
class GrammarSpec:
    """A constraint on a sequence's output (structured output, ``llm_byoc.grammar``).

    ``kind``: "json_schema" (``value``: the schema as JSON text), "json_object"
    (any JSON object; ``value`` unused), "regex" (``value``: the pattern) or "lark"
    (a Lark grammar in llguidance's dialect; built by the front end, e.g. for tool calls).
    """

    kind: str
    value: str = ""


MAX_TOP_LOGPROBS = 20  # alternatives per token (OpenAI's limit)
MAX_LOGIT_BIAS = 1024  # token ids one request may bias
MAX_STOP_TOKEN_IDS = 64


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens for one sequence. Greedy unless temperature > 0."""

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k filter
    repetition_penalty: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    ignore_eos: bool = False
    logprobs: bool = False
    grammar: GrammarSpec | None = None  # constrained decoding: every token must keep the output valid
    # OpenAI's fields (each default changes nothing)
    min_tokens: int = 0  # EOS is held back until this many tokens are generated
    presence_penalty: float = 0.0  # subtracted once from the logit of every token already generated
    frequency_penalty: float = 0.0  # subtracted per time a token was already generated
    top_logprobs: int = 0  # with logprobs: also the most likely alternatives, at most MAX_TOP_LOGPROBS
    min_p: float = 0.0  # tokens below min_p x the likeliest token's probability are dropped (sampling only)
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias) added to the logits before anything else
    stop_token_ids: tuple[int, ...] = ()  # generating one of these ends the sequence (STOP), as EOS does
    typical_p: float = 1.0  # TGI's typical sampling (worker/sampler.py); 1: off
    # the prompt's log-probabilities (vLLM's prompt_logprobs): None: not computed; k: each prompt token's
    # log-probability under the raw model and the k likeliest alternatives (0: none). Bypasses prefix-cache hits.
    prompt_logprobs: int | None = None
    speculative: bool = True  # False: never speculate for this sequence (engine/speculative.py)

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "logit_bias", tuple(tuple(pair) for pair in self.logit_bias))  # JSON: lists
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def validate(self, max_new_tokens_limit: int) -> "SamplingParams":
        """Raise InvalidRequest with a clear message for values that cannot work."""

        def is_int(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        def is_num(v: Any) -> bool:
            return (is_int(v) or isinstance(v, float)) and math.isfinite(v)

        if not is_int(self.max_new_tokens) or not 1 <= self.max_new_tokens <= max_new_tokens_limit:
            raise InvalidRequest(
                f"max_new_tokens must be an integer from 1 to {max_new_tokens_limit}, "
                f"got {self.max_new_tokens!r}"
            )
        if not is_num(self.temperature) or self.temperature < 0:
            raise InvalidRequest(f"temperature must be a number >= 0, got {self.temperature!r}")
        if not is_num(self.top_p) or not 0 < self.top_p <= 1:
            raise InvalidRequest(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not is_int(self.top_k) or self.top_k < 0:
            raise InvalidRequest(f"top_k must be an integer >= 0, got {self.top_k!r}")
        if not is_num(self.repetition_penalty) or self.repetition_penalty <= 0:
            raise InvalidRequest(
                f"repetition_penalty must be a number > 0, got {self.repetition_penalty!r}"
            )
        if len(self.stop) > 16 or not all(isinstance(s, str) and s for s in self.stop):
            raise InvalidRequest("stop must be at most 16 non-empty strings")
        if self.seed is not None and (not is_int(self.seed) or not 0 <= self.seed < 2**63):
            raise InvalidRequest(f"seed must be a non-negative integer, got {self.seed!r}")
        if not isinstance(self.ignore_eos, bool) or not isinstance(self.logprobs, bool):
            raise InvalidRequest("ignore_eos and logprobs must be booleans")
        grammar = self.grammar
        if grammar is not None and not (
            isinstance(grammar, GrammarSpec) and grammar.kind in GRAMMAR_KINDS and isinstance(grammar.value, str)
        ):
            raise InvalidRequest(f"grammar must be a GrammarSpec of kind {', '.join(GRAMMAR_KINDS)}")
        if not is_int(self.min_tokens) or not 0 <= self.min_tokens <= self.max_new_tokens:
            raise InvalidRequest(
                f"min_tokens must be an integer from 0 to max_new_tokens ({self.max_new_tokens}), got {self.min_tokens!r}"
            )
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not is_num(value) or not -2.0 <= value <= 2.0:
                raise InvalidRequest(f"{name} must be a number from -2 to 2, got {value!r}")
        if not is_int(self.top_logprobs) or not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
            raise InvalidRequest(f"top_logprobs must be an integer from 0 to {MAX_TOP_LOGPROBS}, got {self.top_logprobs!r}")
        if self.top_logprobs and not self.logprobs:
            raise InvalidRequest("top_logprobs needs logprobs")
        if not is_num(self.min_p) or not 0.0 <= self.min_p <= 1.0:
            raise InvalidRequest(f"min_p must be a number from 0 to 1, got {self.min_p!r}")
        if len(self.logit_bias) > MAX_LOGIT_BIAS or not all(
            len(pair) == 2 and is_int(pair[0]) and pair[0] >= 0 and is_num(pair[1]) and -100 <= pair[1] <= 100
            for pair in self.logit_bias
        ):
            raise InvalidRequest(f"logit_bias must map at most {MAX_LOGIT_BIAS} token ids to biases from -100 to 100")
        if len(self.stop_token_ids) > MAX_STOP_TOKEN_IDS or not all(
            is_int(t) and t >= 0 for t in self.stop_token_ids
        ):
            raise InvalidRequest(f"stop_token_ids must be at most {MAX_STOP_TOKEN_IDS} token ids (integers >= 0)")
        if not is_num(self.typical_p) or not 0 < self.typical_p <= 1:
            raise InvalidRequest(f"typical_p must be in (0, 1], got {self.typical_p!r}")
        k = self.prompt_logprobs
        if k is not None and (not is_int(k) or not 0 <= k <= MAX_TOP_LOGPROBS):
            raise InvalidRequest(f"prompt_logprobs must be an integer from 0 to {MAX_TOP_LOGPROBS}, got {k!r}")
        return self

    def check_token_ids(self, vocab_size: int) -> None:
        """InvalidRequest for a logit_bias or stop_token_ids id outside the vocabulary."""
        for name, ids in (("logit_bias", [t for t, _ in self.logit_bias]), ("stop_token_ids", self.stop_token_ids)):
            for t in ids:
                if not 0 <= t < vocab_size:
                    raise InvalidRequest(f"{name}: token id {t} is not in the vocabulary (0..{vocab_size - 1})")


# --- engine core <-> model worker --------------------------------------------


@dataclass(frozen=True)
class RopeByLength:
    """A RoPE whose table depends on the sequence's length (``dynamic``, ``longrope``), as the engine sees it.

    Transformers picks the table of a forward from the sequence's length then: the prompt's length for the
    prefill, ``position + 1`` for each decode. So each token's table follows from its position and the
    sequence's ``rope_length`` (its prompt's length, see ``ScheduledChunk``), and two sequences may share
    cached blocks only when their ``cache_key`` is the same."""

    rope_type: str  # "dynamic" | "longrope"
    threshold: int  # lengths up to this use the unscaled (longrope: short) table
    recompute_on_switch: bool = False  # Phi-3: outgrowing the threshold recomputes every token (long factors)

    def cache_key(self, rope_length: int) -> str:
        """The prefix-cache key space of a sequence with this ``rope_length``."""
        if rope_length <= self.threshold:
            return "rope:base"
        return "rope:long" if self.rope_type == "longrope" else f"rope:{rope_length}"


@dataclass(frozen=True)
class ModelInfo:
    """What the worker tells the engine once the model is loaded and its KV cache allocated."""

    model_type: str  # "llama", "opt", ...
    model_path: str  # resolved local folder or .gguf file: the front end loads its tokenizer from here
    vocab_size: int
    max_model_len: int
    eos_token_ids: list[int]
    device: str
    dtype: str
    max_num_seqs: int  # sequences in one batch
    load_time_s: float
    param_bytes: int = 0
    kv_block_size: int = 16  # tokens per KV cache block
    num_kv_blocks: int = 0  # blocks in the pool, the null block (id 0) included
    kv_bytes_per_token: int = 0  # keys + values of one token, all layers
    linear_backend: str = ""  # the projection kernels the worker chose (worker/linear.py)
    num_layers: int = 0
    lora_modules: dict[str, list[int]] = field(default_factory=dict)  # module -> [in, out]; {}: no LoRA
    engine: str = "native"  # the engine that runs the model: native | vllm (engine/engine_choice.py)
    engine_reason: str = ""  # why that one (LLM_BYOC_ENGINE, or what auto saw)
    rope_by_length: RopeByLength | None = None  # None: one RoPE table for every sequence
    decoder: str = "native"  # our engine's decoder: native | generic (the generic transformers path)
    sliding_window: int | None = None  # the window of its sliding-window layers; None: no layer has one
    all_layers_windowed: bool = False  # every layer attends within sliding_window (Mistral): older blocks are freed

    @property
    def kv_cache_bytes(self) -> int:
        return self.num_kv_blocks * self.kv_block_size * self.kv_bytes_per_token

    @property
    def kv_capacity_tokens(self) -> int:
        """Tokens the pool holds for sequences (block 0 is never given out)."""
        return max(0, self.num_kv_blocks - 1) * self.kv_block_size


@dataclass(frozen=True)
class NewSequence:
    """Sent once, with the step where the sequence's first chunk is computed."""

    seq_id: str
    params: SamplingParams
    adapter: str = ""  # the uid of its LoRA adapter (active in a slot); "": the base model
    # draft-model speculation only: the prompt tokens of the cached prefix its first chunk starts after (the
    # draft model computes them; no chunk carries them)
    prefix_token_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class ScheduledChunk:
    """Compute ``token_ids`` at positions start_pos.. for one sequence.

    A prefill chunk carries several prompt tokens; a decode carries the one
    token sampled last step. ``sample`` is true when this chunk reaches the end
    of what is known, so the worker samples the next token. ``block_ids`` are
    the KV cache blocks appended to the sequence's block table for this chunk
    (at its first chunk: its whole table so far, cached prefix blocks first);
    the worker keeps the table, so later chunks send only new blocks.
    """

    seq_id: str
    token_ids: list[int]
    start_pos: int
    sample: bool
    block_ids: list[int] = field(default_factory=list)
    rope_length: int = 0  # RopeByLength models: the sequence's prompt length (0 otherwise); see RopeByLength
    num_draft: int = 0  # speculative decoding: the last num_draft tokens are proposals to verify (sample is true)
    # draft-model speculation: the worker's draft model proposes this many tokens after token_ids and they are
    # verified in the same step (sample is true; block_ids cover them)
    num_propose: int = 0


@dataclass(frozen=True)
class TokenMask:
    """The tokens one sampling row may pick this step: bit ``t % 32`` of little-endian int32
    word ``t // 32`` set means token t is allowed (base64 of the words, one per 32 vocabulary entries)."""

    seq_id: str
    bits: str


@dataclass(frozen=True)
class StepBatch:
    step_id: int
    new: list[NewSequence] = field(default_factory=list)
    chunks: list[ScheduledChunk] = field(default_factory=list)
    freed: list[str] = field(default_factory=list)  # finished: drop these sequences' state first
    preempted: list[str] = field(default_factory=list)  # drop their block tables, keep their sampling state
    # LoRA, handled before anything else: forget, load into memory, copy into the batch's slots
    drop_adapters: list[str] = field(default_factory=list)  # uids
    load_adapters: list[AdapterSpec] = field(default_factory=list)
    activate_adapters: list[AdapterActivation] = field(default_factory=list)
    masks: list[TokenMask] = field(default_factory=list)  # constrained rows: applied before sampling


@dataclass(frozen=True)
class TopLogprobs:
    """The most likely tokens at one position and their log-probabilities, most likely first."""

    token_ids: list[int]
    logprobs: list[float]


@dataclass(frozen=True)
class PromptLogprobs:
    """The prompt's log-probabilities under the raw model: entry i is prompt token i + 1's (the first token
    has none); ``top`` (when asked for alternatives) the likeliest tokens at the same positions."""

    logprobs: list[float]
    top: list[TopLogprobs] | None = None


@dataclass(frozen=True)
class SampledToken:
    seq_id: str
    token_id: int
    logprob: float | None = None
    top: TopLogprobs | None = None  # only when the sequence asked for top_logprobs
    prompt: PromptLogprobs | None = None  # with the first sample of a sequence that asked for prompt_logprobs


@dataclass(frozen=True)
class StepOutput:
    step_id: int
    samples: list[SampledToken]
    elapsed_s: float = 0.0
    adapter_results: list[AdapterLoadResult] = field(default_factory=list)  # one per load_adapters entry


@dataclass(frozen=True)
class WorkerReady:
    info: ModelInfo


@dataclass(frozen=True)
class WorkerFailure:
    """A worker-side error as plain data. ``fatal``: the worker is exiting."""

    error_type: str
    message: str
    fatal: bool = False


@dataclass(frozen=True)
class Shutdown:
    pass


# --- front end <-> engine core -------------------------------------------------


@dataclass(frozen=True)
class AddSequence:
    seq_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    adapter: str = ""  # a registered adapter's name; "": the base model
    session_id: str = ""  # an open stateful session (engine/session_pins.py)

    def check_prompt(self, max_model_len: int, vocab_size: int, kv_note: str = "") -> None:
        """InvalidRequest unless the prompt fits the context window with one new token and every id is
        in the vocabulary: what either engine checks before it takes a sequence."""
        ids = self.prompt_token_ids
        if not ids:
            raise InvalidRequest("the prompt is empty")
        if len(ids) + 1 > max_model_len:
            raise InvalidRequest(f"the prompt has {len(ids)} tokens; the context window is {max_model_len} "
                                 f"tokens (prompt + at least 1 new token){kv_note}")
        for t in ids:
            if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab_size:
                raise InvalidRequest(f"token id {t!r} is not in the vocabulary (0..{vocab_size - 1})")
        self.params.check_token_ids(vocab_size)


@dataclass(frozen=True)
class AbortSequence:
    seq_id: str


@dataclass(frozen=True)
class SequenceUpdate:
    """New tokens for one sequence; ``finish_reason`` set on its last update."""

    seq_id: str
    token_ids: list[int]
    logprobs: list[float] | None = None
    finish_reason: FinishReason | None = None
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0  # prompt tokens whose KV came from the prefix cache
    top_logprobs: list[TopLogprobs] | None = None  # one per token, when asked for
    prompt_logprobs: PromptLogprobs | None = None  # on the first update, when asked for


@dataclass(frozen=True)
class SequenceRejected:
    """The engine refused or failed a sequence (queue full, too long, engine dead)."""

    seq_id: str
    error_type: str
    message: str


@dataclass(frozen=True)
class EngineOutputs:
    updates: list[SequenceUpdate] = field(default_factory=list)
    rejected: list[SequenceRejected] = field(default_factory=list)


@dataclass(frozen=True)
class HealthRequest:
    pass


@dataclass(frozen=True)
class MetricsRequest:
    """Front end -> engine: the engine's own Prometheus series, for ``/metrics`` (answered by EngineMetrics)."""


@dataclass(frozen=True)
class EngineMetrics:
    """The engine's own series in Prometheus' text format: vLLM's ``vllm:*`` with that engine,
    empty with ours (whose figures travel in HealthReport and are exported by the front end)."""

    text: str = ""


@dataclass(frozen=True)
class SessionCommand:
    """Front end -> engine: ``action`` "open" (a new session) or "close" (``session_id``)."""

    call_id: int
    action: str
    session_id: str = ""


@dataclass(frozen=True)
class SessionReply:
    call_id: int
    session_id: str = ""
    ttl_s: float = 0.0  # it closes after this long idle
    error_type: str = ""
    message: str = ""


@dataclass(frozen=True)
class KVCacheStats:
    """The KV cache as the engine's block manager sees it (counters are since start-up)."""

    block_size: int
    blocks_total: int  # blocks sequences can hold (the null block not counted)
    blocks_used: int  # held by running sequences
    blocks_cached: int  # holding a reusable prefix (used or not)
    tokens_used: int  # tokens held by running sequences (a shared block counts once)
    prefix_queried_tokens: int = 0
    prefix_hit_tokens: int = 0
    preemptions: int = 0
    sessions_open: int = 0
    blocks_pinned: int = 0  # held for open sessions

    @property
    def usage(self) -> float:
        """Tokens held over tokens the cache can hold."""
        capacity = self.blocks_total * self.block_size
        return self.tokens_used / capacity if capacity else 0.0


@dataclass(frozen=True)
class SpecDecodeStats:
    """Speculative decoding since start-up (vLLM's spec_decode counters)."""

    method: str
    num_drafts: int = 0  # verify chunks scheduled
    num_draft_tokens: int = 0  # tokens proposed
    num_accepted_tokens: int = 0  # proposed tokens the model agreed with

    @property
    def acceptance_rate(self) -> float:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0


@dataclass(frozen=True)
class HealthReport:
    state: EngineState
    detail: str = ""
    info: ModelInfo | None = None
    num_waiting: int = 0
    num_running: int = 0
    kv_cache: KVCacheStats | None = None
    lora: LoRAStats | None = None
    spec_decode: SpecDecodeStats | None = None  # None: speculation off


# --- codec ----------------------------------------------------------------------


class ProtocolError(ValueError):
    """Bytes that are not a message of this protocol."""


_CODEC = MessageCodec(
    messages=(
        SamplingParams,
        GrammarSpec,
        TokenMask,
        ModelInfo,
        RopeByLength,
        NewSequence,
        ScheduledChunk,
        StepBatch,
        TopLogprobs,
        PromptLogprobs,
        SampledToken,
        StepOutput,
        WorkerReady,
        WorkerFailure,
        Shutdown,
        AddSequence,
        AbortSequence,
        SequenceUpdate,
        SequenceRejected,
        EngineOutputs,
        HealthRequest,
        MetricsRequest,
        EngineMetrics,
        SessionCommand,
        SessionReply,
        KVCacheStats,
        SpecDecodeStats,
        HealthReport,
        AdapterSpec,
        AdapterActivation,
        AdapterLoadResult,
        AdapterStatus,
        AdapterCommand,
        AdapterReply,
        LoRAStats,
    ),
    enums=(FinishReason, EngineState),
    error=ProtocolError,
)
encode = _CODEC.encode
decode = _CODEC.decode
