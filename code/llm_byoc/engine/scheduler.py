"""Continuous batching: waiting -> running -> finished, pure Python, admitted by KV memory.

Contract (vLLM v1 style, no separate prefill and decode phases): at every step
each running sequence's computed tokens catch up with its known tokens
(prompt + generated), within a token budget of ``max_batched_tokens``:

1. every decoding sequence (one token behind) gets its one token first;
2. prefilling sequences, in arrival order, get the next chunk of their prompt
   with whatever budget is left (chunked prefill);
3. waiting sequences are admitted, front of the queue first, while fewer than
   ``max_num_seqs`` run, budget is left and their KV blocks fit.

Beside decodes, 2 and 3 share one cap on prompt tokens (``_step_prefill_cap``:
``prefill_chunk_tokens``, 64 on a CPU, wider while many prompts wait): the
step's first prompt may take the whole budget, later ones only what is left of
that cap (``_prefill_room``).

Memory (``KVCacheManager``): a sequence holds the blocks its computed tokens
need. Before a step the running sequences grow their blocks, oldest first;
when none is free, the newest running sequence is preempted: its blocks are
freed and it goes back to the front of the queue, to be recomputed once memory
allows (its stream pauses; the tokens it already sent stay valid, and the
worker keeps its sampling state, so its output is what it would have been).
Nothing is admitted in a step that preempted. A waiting sequence is admitted
only when its blocks fit with a small reserve left (none while nothing runs).
With prefix caching, a sequence admitted behind cached blocks starts with
them and computes only the rest of its prompt; after each step the blocks it
filled are registered in the cache. A waiting sequence whose next prompt block
a running one is computing (n samples of one prompt, a shared system prompt
in a burst) waits for it to be cached, keeping its place; others behind it
may go first. A sequence that asks for its prompt's log-probabilities
(``prompt_logprobs``) takes no cached blocks: every prompt position is
computed (the blocks it fills are still cached for others).

``postprocess`` appends the sampled tokens and applies the stop rules. A
sequence that finishes leaves the running batch in that same step (its blocks
go back to the pool at once) and is listed in ``freed`` of the next batch so
the worker drops its state.

Stop rules: an EOS token (unless ``ignore_eos``) or one of ``stop_token_ids`` -> STOP; ``max_new_tokens``
generated -> LENGTH; the context window full (prompt + generated reaches
``max_model_len``) -> LENGTH. ``max_new_tokens`` is not clipped against the
window at admission: a sequence whose prompt + max_new_tokens exceeds the
window simply stops with LENGTH once the window is full. Stop strings are
applied by the front end, which then aborts the sequence here.

LoRA: a sequence with an adapter is admitted only once its adapter is in one
of the worker's slots (``AdapterSlots``); until then it waits (sequences behind
it that can run do), while its adapter is loaded and put in a slot if one is
free or held by an adapter no running sequence uses. Its prefix-cache blocks
live in the adapter's own namespace.

Admission: a sequence is refused with QueueFull when it would have to wait
behind ``max_waiting`` others (free running slots count as no wait), and with
InvalidRequest when its prompt can never fit the context or the KV cache.

RoPE by length (``protocol.RopeByLength``: ``dynamic``, ``longrope``): each chunk
carries its sequence's ``rope_length`` (the prompt's length), from which the
worker rotates each token as ``generate`` of that prompt alone would; sequences
whose tables differ never share prefix-cache blocks (the key joins the cache
namespace). Phi-3's ``longrope`` recomputes a sequence whose length outgrows
the threshold with the long factors, as transformers drops its cache then: it
goes back to the front of the queue like a preempted one, ``rope_length`` now
its whole length, and is admitted again in the same step if memory allows.

Sliding windows: when every layer of the model attends within a window
(``ModelInfo.all_layers_windowed``: Mistral, Mixtral or Phi-3 with one set),
after each step a running sequence's blocks wholly before its window go back
to the pool (``KVCacheManager.free_behind_window``), except a session's prompt
blocks, so a long generation holds about ``window / block_size + 1`` blocks.
A preempted one is recomputed from its first token (prefix-cache hits included).

Structured output (``structured_output.py``): a sequence with a grammar waits,
keeping its place, until its grammar is compiled (off the step loop); each of
its sampling steps carries its token mask, and each sampled token advances its
grammar, which may finish it (STOP: the output is complete).

Speculative decoding (``speculative.py``, ``limits.speculative`` ``ngram`` or ``draft``):
after decodes and prefill chunks, while at most ``spec_max_num_seqs`` run and
budget is left, a decoding sequence that may speculate (``can_speculate``, not
switched off by its acceptance rate) gets up to k proposed tokens after its
last one in the same chunk (``num_draft``; never past ``max_new_tokens`` or the
window); its blocks grow for all of them. ``num_computed`` counts only its last
token until the worker answers: then it gains the accepted proposals, and the
tokens (accepted + the worker's own) go through the stop rules one by one, the
rest dropped at the first stop. Blocks past the computed tokens are freed (the
worker trims its table the same way), and only blocks of computed, accepted
tokens are ever hashed into the prefix cache. With a draft model the chunk
only asks for k proposals (``num_propose``): the worker's draft makes them, and
a new sequence admitted behind cached blocks carries their tokens
(``prefix_token_ids``) for the draft to compute. A sequence switched off for
low acceptance is tried again after ``COOL_DOWN_TOKENS`` generated tokens.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from dataclasses import dataclass

from collections import Counter

from ..adapters.messages import AdapterSpec, LoRAStats
from ..config import EngineConfig
from ..grammar import GrammarCompiler
from ..errors import InvalidRequest, ModelLoadError, QueueFull
from ..protocol import (
    AddSequence,
    FinishReason,
    KVCacheStats,
    ModelInfo,
    NewSequence,
    RopeByLength,
    SampledToken,
    ScheduledChunk,
    SequenceRejected,
    SequenceUpdate,
    SpecDecodeStats,
    StepBatch,
    StepOutput,
)
from .adapter_slots import AdapterSlots
from .kv_cache_manager import KVCacheManager
from .session_pins import SessionPins
from .structured_output import StructuredOutput
from .sequence import Sequence, SequenceStatus
from .speculative import Proposal, SpecTracker, can_speculate, propose_ngram

ADMISSION_RESERVE = 0.01  # of the blocks, kept free when admitting beside running sequences
CPU_PREFILL_CHUNK_TOKENS = 64  # LLM_BYOC_PREFILL_CHUNK_TOKENS's default on a CPU (docs/design/figures.md)


@dataclass(frozen=True)
class SchedulerLimits:
    max_num_seqs: int
    max_batched_tokens: int
    max_model_len: int
    max_waiting: int
    max_new_tokens_limit: int
    vocab_size: int
    eos_token_ids: frozenset[int]
    num_kv_blocks: int  # the worker's pool, the null block included
    block_size: int = 16
    enable_prefix_caching: bool = True
    max_loras: int = 8
    max_cpu_loras: int = 32
    session_kv_share: float = 0.5  # of the blocks, at most, pinned by open sessions
    session_ttl_s: float = 1200.0
    rope_by_length: RopeByLength | None = None  # the model's RoPE depends on the sequence's length
    speculative: str = "off"  # off | ngram | draft
    num_speculative_tokens: int = 4
    ngram_min: int = 1
    ngram_max: int = 4
    spec_max_num_seqs: int = 8  # speculate only while at most this many sequences run
    spec_min_acceptance: float = 0.2
    window: int | None = None  # every layer attends within this sliding window: older blocks are freed
    prefill_chunk_tokens: int = 0  # beside decodes, a step's prompt tokens beyond its first prompt (_step_prefill_cap); 0: no cap

    def __post_init__(self) -> None:
        capacity = (self.num_kv_blocks - 1) * self.block_size
        if capacity < self.max_model_len:
            raise ValueError(
                f"the KV cache holds {capacity} tokens, less than one sequence of max_model_len "
                f"{self.max_model_len}"
            )

    @classmethod
    def from_config(cls, config: EngineConfig, info: ModelInfo) -> SchedulerLimits:
        """Engine settings, narrowed by what the loaded model and its KV cache allow."""
        max_model_len = min(info.max_model_len, info.kv_capacity_tokens)
        if config.max_model_len is not None:
            max_model_len = min(max_model_len, config.max_model_len)
        return cls(
            max_num_seqs=info.max_num_seqs,  # the worker resolved LLM_BYOC_MAX_NUM_SEQS for its device
            max_batched_tokens=config.max_batched_tokens,
            max_model_len=max_model_len,
            max_waiting=config.max_waiting,
            max_new_tokens_limit=config.max_new_tokens_limit,
            vocab_size=info.vocab_size,
            eos_token_ids=frozenset(info.eos_token_ids),
            num_kv_blocks=info.num_kv_blocks,
            block_size=info.kv_block_size,
            enable_prefix_caching=config.enable_prefix_caching,
            max_loras=config.max_loras,
            max_cpu_loras=config.max_cpu_loras,
            session_kv_share=config.session_kv_share,
            session_ttl_s=config.session_ttl_s,
            rope_by_length=info.rope_by_length,
            speculative=config.speculative_method,
            num_speculative_tokens=config.num_speculative_tokens,
            ngram_min=config.ngram_min,
            ngram_max=config.ngram_max,
            spec_max_num_seqs=config.speculative_max_num_seqs,
            spec_min_acceptance=config.speculative_min_acceptance,
            window=info.sliding_window if info.all_layers_windowed else None,
            prefill_chunk_tokens=config.prefill_chunk_tokens
            or (CPU_PREFILL_CHUNK_TOKENS if info.device.startswith("cpu") else 0),
        )


class Scheduler:
    def __init__(self, limits: SchedulerLimits, grammars: GrammarCompiler | None = None):
        self.limits = limits
        self.structured = StructuredOutput(grammars)
        self.kv = KVCacheManager(limits.num_kv_blocks, limits.block_size, limits.enable_prefix_caching)
        self._reserve = max(1, int(self.kv.pool.num_usable * ADMISSION_RESERVE))
        self._waiting: deque[Sequence] = deque()
        self._running: dict[str, Sequence] = {}
        self._freed: list[str] = []
        self._scheduled: list[Sequence] = []  # computed in the step in flight
        self._prefill_cap = 0  # the step being planned: its cap on prompt tokens beyond the first prompt's (0: none)
        self._prefill_planned = 0  # and its prompt tokens so far
        self._expect_sample: set[str] = set()  # scheduled last step with sample=True
        self._step_id = 0
        self._arrivals = 0
        self.num_preemptions = 0
        self.adapters = AdapterSlots(limits.max_loras, limits.max_cpu_loras)
        self.sessions = SessionPins(self.kv.pool, int(limits.session_kv_share * self.kv.pool.num_usable),
                                    limits.session_ttl_s)
        self._retired: set[str] = set()  # unregistered adapters still used by queued or running sequences
        self._rejected: list[SequenceRejected] = []
        self.adapter_requests: Counter[str] = Counter()
        self.adapter_tokens: Counter[str] = Counter()
        self.spec = None if limits.speculative == "off" else SpecTracker(limits.speculative, limits.spec_min_acceptance)
        self._drafts: dict[str, Proposal] = {}  # proposals of the step in flight

    # --- queue ---------------------------------------------------------------

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_running(self) -> int:
        return len(self._running)

    def has_work(self) -> bool:
        """Sequences to compute (not only ones whose grammar compiles), finished ones the worker has
        not dropped yet, or adapter changes."""
        if self._running or self._freed or self.adapters.has_changes():
            return True
        return any(not self.structured.pending(seq) for seq in self._waiting)

    def add(self, request: AddSequence, adapter: AdapterSpec | None = None) -> None:
        """Queue a sequence (with its registered adapter, if any); raises InvalidRequest or QueueFull."""
        self._validate(request)
        free_slots = max(0, self.limits.max_num_seqs - len(self._running))
        if len(self._waiting) >= self.limits.max_waiting + free_slots:
            raise QueueFull(
                f"the engine queue is full ({len(self._waiting)} sequences waiting); retry later"
            )
        if request.session_id:
            self.sessions.check(request.session_id)
        self._arrivals += 1
        namespace = f"lora:{adapter.uid}" if adapter is not None else ""
        seq = Sequence(request.seq_id, list(request.prompt_token_ids), request.params, arrival=self._arrivals,
                       cache_namespace=namespace, adapter=adapter, session_id=request.session_id)
        if self.limits.rope_by_length is not None:
            self._set_rope_length(seq, seq.num_tokens)
        self._waiting.append(seq)
        self.structured.pending(seq)  # a grammar starts compiling now
        if adapter is not None:
            self.adapter_requests[adapter.name] += 1

    def retire_adapter(self, uid: str) -> None:
        """An unregistered adapter leaves the worker once no queued or running sequence uses it."""
        self._retired.add(uid)

    def drain_rejected(self) -> list[SequenceRejected]:
        """Sequences failed since the last call for reasons of their own (their adapter would not load)."""
        rejected, self._rejected = self._rejected, []
        return rejected

    def abort(self, seq_id: str) -> SequenceUpdate | None:
        """Remove a waiting or running sequence; None when it is not here (any more)."""
        seq = self._running.get(seq_id) or next((s for s in self._waiting if s.seq_id == seq_id), None)
        if seq is None:
            return None
        self._finish(seq, FinishReason.ABORT)
        return self._final_update(seq)

    def finish_all(self) -> list[str]:
        """Drop every waiting and running sequence (the engine failed); their ids."""
        seqs = list(self._waiting) + list(self._running.values())
        for seq in seqs:
            self._finish(seq, FinishReason.ERROR)
        return [seq.seq_id for seq in seqs]

    def fail(self, seq_ids: list[str]) -> None:
        """Finish these running sequences with ERROR (their step failed in the worker)."""
        for seq_id in seq_ids:
            seq = self._running.get(seq_id)
            if seq is not None:
                self._finish(seq, FinishReason.ERROR)

    def kv_stats(self) -> KVCacheStats:
        kv = self.kv
        used = kv.pool.num_usable - kv.pool.num_free
        unfilled = sum(kv.unfilled_slots(seq) for seq in self._running.values())
        return KVCacheStats(
            block_size=kv.block_size,
            blocks_total=kv.pool.num_usable,
            blocks_used=used,
            blocks_cached=kv.pool.num_cached,
            tokens_used=max(0, used * kv.block_size - unfilled),
            prefix_queried_tokens=kv.queried_tokens,
            prefix_hit_tokens=kv.hit_tokens,
            preemptions=self.num_preemptions,
            sessions_open=self.sessions.num_open,
            blocks_pinned=self.sessions.num_pinned,
        )

    # --- one step ------------------------------------------------------------

    def schedule(self) -> StepBatch | None:
        """The next step's work (maybe only sequences to free), or None when there is none."""
        switched = self._switch_rope()
        plan = self._plan_running()
        preempted = self._grow_blocks(plan)
        chunks = [self._chunk(self._running[s], n, blocks) for s, (n, blocks) in plan.items() if s in self._running]
        budget = self.limits.max_batched_tokens - sum(len(c.token_ids) for c in chunks)
        new: list[NewSequence] = []
        if not preempted:
            self._admit(budget, chunks, new)
        self._retire_unused_adapters()
        if not chunks and not preempted and not self._freed and not self.adapters.has_changes():
            return None
        self.adapters.touch({s.adapter.uid for s in self._running.values() if s.adapter is not None})
        drops, loads, activations = self.adapters.take_changes()
        self._step_id += 1
        freed, self._freed = self._freed, []
        self._drafts = {c.seq_id: self._drafts[c.seq_id] for c in chunks if c.num_draft or c.num_propose}
        self._scheduled = [self._running[c.seq_id] for c in chunks]
        self._expect_sample = {c.seq_id for c in chunks if c.sample}
        masks = self.structured.masks([self._running[c.seq_id] for c in chunks if c.sample])
        return StepBatch(self._step_id, new, chunks, freed, switched + preempted, drops, loads, activations, masks)

    def _plan_running(self) -> dict[str, tuple[int, list[int]]]:
        """Tokens each running sequence computes this step: decodes first, then prefill chunks within
        ``_prefill_room``."""
        budget = self.limits.max_batched_tokens
        plan: dict[str, tuple[int, list[int]]] = {}
        decoding = [s for s in self._running.values() if s.num_uncomputed == 1]
        prefilling = [s for s in self._running.values() if s.num_uncomputed > 1]
        for seq in decoding:
            if budget == 0:
                break
            plan[seq.seq_id] = (1, [])
            budget -= 1
        self._prefill_cap, self._prefill_planned = self._step_prefill_cap(len(decoding), prefilling), 0
        for seq in prefilling:
            n = min(seq.num_uncomputed, self._prefill_room(budget))
            if n == 0:
                break
            plan[seq.seq_id] = (n, [])
            budget -= n
            self._prefill_planned += n
        if self.spec is not None and len(self._running) <= self.limits.spec_max_num_seqs:
            for seq in decoding:
                if budget <= 0:
                    break
                proposal = self._propose(seq, budget)
                if proposal is not None:
                    self._drafts[seq.seq_id] = proposal
                    plan[seq.seq_id] = (1 + proposal.count, [])
                    budget -= proposal.count
        return plan

    def _step_prefill_cap(self, num_decoding: int, prefilling: list[Sequence]) -> int:
        """This step's cap on prompt tokens beyond its first prompt (0: none): beside decodes,
        ``prefill_chunk_tokens`` or sqrt(P * (d + W / 3)), whichever is more, for W prompts of P tokens in
        all waiting and d rows decoding. A queue's mean time to first token is least at a chunk of about
        sqrt(P * (F + d + W / 3)) (F: a step's fixed cost in tokens; every step carries the d decodes, and
        each prompt done adds one more to every later step); the configured chunk stands for the F part,
        which rules a short queue beside few streams (16 clients), the rest a long one (64 clients at once,
        where a fixed 64 tokens would admit the burst too slowly: a later median first token;
        ``benchmarks/prefill_chunk_ab.py`` measures both)."""
        chunk = self.limits.prefill_chunk_tokens
        if not (chunk and num_decoding):
            return 0
        tokens = sum(s.num_uncomputed for s in itertools.chain(prefilling, self._waiting))
        prompts = len(prefilling) + len(self._waiting)
        return max(chunk, math.isqrt(tokens * (3 * num_decoding + prompts) // 3))

    def _prefill_room(self, budget: int) -> int:
        """Prompt tokens the next prompt in line may compute this step. The step's first prompt may take
        the whole budget; beside decoding sequences, later ones join only while the step's prompt tokens
        stay within ``_step_prefill_cap``. A step lasts as long as its prompt tokens take: a burst of
        short prompts packed into one step would all wait for the last of them (and stall every stream
        as long), while one long prompt cut smaller would only pay a step's fixed cost more often."""
        if not (self._prefill_cap and self._prefill_planned):
            return budget
        return max(0, min(budget, self._prefill_cap - self._prefill_planned))

    def _propose(self, seq: Sequence, budget: int) -> Proposal | None:
        """Proposals for a decoding sequence, within the budget, max_new_tokens and the window: the n-gram's
        tokens, or how many the worker's draft model proposes."""
        if (not can_speculate(seq.params) or seq.seq_id not in self._running
                or not self.spec.enabled(seq.seq_id, seq.num_generated)):
            return None
        limits = self.limits
        k = min(limits.num_speculative_tokens, budget, seq.params.max_new_tokens - seq.num_generated - 1,
                limits.max_model_len - seq.num_tokens)
        if k <= 0:
            return None
        if limits.speculative == "draft":
            return Proposal(k)
        tokens = propose_ngram(seq.token_ids, k, limits.ngram_min, limits.ngram_max)
        return Proposal(len(tokens), tuple(tokens)) if tokens else None

    def _grow_blocks(self, plan: dict[str, tuple[int, list[int]]]) -> list[str]:
        """Blocks for the plan, oldest sequence first; preempt the newest when none is free."""
        preempted: list[str] = []
        for seq in sorted((self._running[s] for s in plan), key=lambda s: s.arrival):
            if seq.seq_id not in self._running:
                continue  # preempted for an older one
            n, _ = plan[seq.seq_id]
            while (added := self.kv.grow(seq, seq.num_computed + n)) is None:
                if self.sessions.release_one():
                    continue  # a session's pinned prefix goes before a running sequence does
                victim = max(self._running.values(), key=lambda s: s.arrival)
                self._preempt(victim)
                preempted.append(victim.seq_id)
                if victim is seq:
                    break
            if added is not None:
                plan[seq.seq_id] = (n, added)
        return preempted

    def _admit(self, budget: int, chunks: list[ScheduledChunk], new: list[NewSequence]) -> None:
        pinned = {s.adapter.uid for s in self._running.values() if s.adapter is not None}
        computing = {h for s in self._running.values() for h in self.kv.being_computed(s)}
        skipped: list[Sequence] = []  # their adapter is not in a slot yet, or their prefix is being computed
        while self._waiting and self._prefill_room(budget) > 0 and len(self._running) < self.limits.max_num_seqs:
            seq = self._waiting[0]
            if self.structured.pending(seq):  # its grammar compiles: it keeps its place
                skipped.append(self._waiting.popleft())
                continue
            refused = self.structured.attach(seq)
            if refused:
                self._refuse(seq, InvalidRequest.error_type, refused)
                continue
            if seq.adapter is not None and not self.adapters.is_active(seq.adapter.uid):
                self.adapters.request(seq.adapter, pinned)
                skipped.append(self._waiting.popleft())
                continue
            wants_prompt = seq.params.prompt_logprobs is not None  # every prompt position computed: no hits
            prefix = [] if wants_prompt else self.kv.cached_prefix(seq)
            if computing and not wants_prompt and self.kv.next_block_hash(seq, len(prefix)) in computing:
                skipped.append(self._waiting.popleft())  # its next block is on its way into the cache
                continue
            cached = len(prefix) * self.kv.block_size
            n = min(seq.num_tokens - cached, self._prefill_room(budget))
            reserve = self._reserve if self._running else 0
            block_ids = self.kv.admit(seq, prefix, cached + n, reserve)
            while block_ids is None and not self._running and self.sessions.release_one():
                block_ids = self.kv.admit(seq, prefix, cached + n, reserve)  # only pins stood in its way
            if block_ids is None:
                break  # first come, first served: the head waits for memory
            self._waiting.popleft()
            if not seq.seen_by_worker:
                seq.num_cached_tokens = cached
                seq.seen_by_worker = True
                prefix = seq.token_ids[:cached] if self.limits.speculative == "draft" else []  # the draft's to know
                new.append(NewSequence(seq.seq_id, seq.params, seq.adapter.uid if seq.adapter else "", prefix))
            seq.status = SequenceStatus.RUNNING
            self._running[seq.seq_id] = seq
            if seq.adapter is not None:
                pinned.add(seq.adapter.uid)
            computing.update(self.kv.being_computed(seq))
            chunks.append(self._chunk(seq, n, block_ids))
            budget -= n
            self._prefill_planned += n
        self._waiting.extendleft(reversed(skipped))

    def _retire_unused_adapters(self) -> None:
        if not self._retired:
            return
        in_use = {s.adapter.uid for s in (*self._running.values(), *self._waiting) if s.adapter is not None}
        for uid in self._retired - in_use:
            self.adapters.forget(uid)
            self._retired.discard(uid)

    def _preempt(self, seq: Sequence, count: bool = True) -> None:
        """Back to the front of the queue, its blocks freed; it is recomputed when admitted again."""
        del self._running[seq.seq_id]
        self._drafts.pop(seq.seq_id, None)
        self.kv.free(seq)
        seq.num_computed = 0
        seq.status = SequenceStatus.WAITING
        self._waiting.appendleft(seq)
        if count:
            self.num_preemptions += 1

    def _switch_rope(self) -> list[str]:
        """Running sequences that outgrew a recomputing RoPE's threshold (Phi-3 ``longrope``), sent back to be
        computed again with the long table (their ids: the worker drops their block tables)."""
        rope = self.limits.rope_by_length
        if rope is None or not rope.recompute_on_switch:
            return []
        switched = [s for s in self._running.values() if s.rope_length <= rope.threshold < s.num_tokens]
        for seq in sorted(switched, key=lambda s: s.arrival, reverse=True):  # the oldest ends up first in line
            self._preempt(seq, count=False)
            self._set_rope_length(seq, seq.num_tokens)
        return [seq.seq_id for seq in switched]

    def _set_rope_length(self, seq: Sequence, length: int) -> None:
        """``seq``'s RoPE goes by ``length`` tokens: its blocks are cached among those of the same table."""
        base = seq.cache_namespace.rsplit("|rope:", 1)[0] if seq.rope_length else seq.cache_namespace
        seq.rope_length = length
        seq.cache_namespace = f"{base}|{self.limits.rope_by_length.cache_key(length)}"
        seq.block_hashes = []

    def _chunk(self, seq: Sequence, n: int, block_ids: list[int]) -> ScheduledChunk:
        start = seq.num_computed
        proposal = (self._drafts.get(seq.seq_id) if seq.num_uncomputed == 1 else None) or Proposal(0)
        n -= proposal.count  # proposals are computed, but count only once accepted
        seq.num_computed += n
        return ScheduledChunk(
            seq_id=seq.seq_id,
            token_ids=seq.token_ids[start : start + n] + list(proposal.token_ids),
            start_pos=start,
            sample=seq.num_computed == seq.num_tokens,
            block_ids=block_ids,
            rope_length=seq.rope_length,
            num_draft=len(proposal.token_ids),
            num_propose=proposal.count - len(proposal.token_ids),
        )

    def postprocess(self, output: StepOutput) -> list[SequenceUpdate]:
        """Cache the blocks the step filled, append sampled tokens, apply stop rules;
        one update per sequence that advanced."""
        drafts, self._drafts = self._drafts, {}
        for seq in self._scheduled:
            if seq.status is SequenceStatus.RUNNING and seq.seq_id not in drafts:
                self.kv.cache_computed(seq)
        stepped, self._scheduled = self._scheduled, []
        self._fail_adapter_loads(self.adapters.on_step_done(output.adapter_results))
        updates: list[SequenceUpdate] = []
        expected, self._expect_sample = self._expect_sample, set()
        by_seq: dict[str, list[SampledToken]] = {}
        for sample in output.samples:  # a verified chunk returns several, in order
            by_seq.setdefault(sample.seq_id, []).append(sample)
        for seq_id, samples in by_seq.items():
            seq = self._running.get(seq_id)
            if seq is None or seq_id not in expected:
                continue  # aborted while the step ran, or not asked for
            proposal = drafts.get(seq_id) or Proposal(0)
            accepted = len(samples) - 1
            if accepted > proposal.count or not proposal.agrees([s.token_id for s in samples[:accepted]]):
                continue  # not what was asked for: failed below
            expected.discard(seq_id)
            if proposal.count:
                seq.num_computed += accepted  # their keys and values were written in this step
                self.spec.record(seq_id, proposal.count, accepted, seq.num_generated + len(samples))
                self.kv.trim(seq)  # the blocks of rejected proposals go back
            updates.append(self._append(seq, samples))
        for seq_id in expected:  # the worker skipped a sequence: fail it, never stall it
            seq = self._running.get(seq_id)
            if seq is not None:
                self._finish(seq, FinishReason.ERROR)
                updates.append(self._final_update(seq))
        self._free_behind_window(stepped)
        return updates

    def _append(self, seq: Sequence, samples: list[SampledToken]) -> SequenceUpdate:
        """Append a step's tokens one by one through the stop rules; tokens after a stop are dropped."""
        reason = None
        taken: list[SampledToken] = []
        for sample in samples:
            seq.token_ids.append(sample.token_id)
            taken.append(sample)
            if seq.adapter is not None:
                self.adapter_tokens[seq.adapter.name] += 1
            reason = self.structured.after_token(seq, sample.token_id, self._stop_reason(seq, sample.token_id))
            if reason is not None:
                break
        seq.num_computed = min(seq.num_computed, seq.num_tokens - 1)  # a stop inside an accepted run
        self.kv.cache_computed(seq)  # accepted proposals are known now: their full blocks are hashed
        if reason is not None:
            self._finish(seq, reason)
        logprobs = None if taken[0].logprob is None else [s.logprob for s in taken]
        tops = None if taken[0].top is None else [s.top for s in taken]
        return SequenceUpdate(seq.seq_id, [s.token_id for s in taken], logprobs, reason, seq.num_prompt_tokens,
                              seq.num_cached_tokens, tops, taken[0].prompt)

    def spec_stats(self) -> SpecDecodeStats | None:
        spec = self.spec
        if spec is None:
            return None
        return SpecDecodeStats(spec.method, spec.num_drafts, spec.num_draft_tokens, spec.num_accepted_tokens)

    def _free_behind_window(self, stepped: list[Sequence]) -> None:
        """Every layer windowed: the blocks the step's sequences left behind their window go back to the pool
        (a session's prompt blocks stay: they are pinned when it finishes)."""
        if self.limits.window is None:
            return
        for seq in stepped:
            if seq.status is SequenceStatus.RUNNING:
                keep = seq.num_prompt_tokens // self.kv.block_size if seq.session_id else 0
                self.kv.free_behind_window(seq, self.limits.window, keep)

    def _fail_adapter_loads(self, failed: dict[str, str]) -> None:
        """Waiting sequences whose adapter would not load fail (nothing of theirs reached the worker)."""
        for seq in [s for s in self._waiting if s.adapter is not None and s.adapter.uid in failed]:
            message = f"adapter {seq.adapter.name!r} failed to load: {failed[seq.adapter.uid]}"
            self._refuse(seq, ModelLoadError.error_type, message)

    def _refuse(self, seq: Sequence, error_type: str, message: str) -> None:
        """A waiting sequence fails for a reason of its own (reported by ``drain_rejected``)."""
        self._finish(seq, FinishReason.ERROR)
        self._rejected.append(SequenceRejected(seq.seq_id, error_type, message))

    def lora_stats(self, registered: int) -> LoRAStats:
        running = sorted({s.adapter.name for s in self._running.values() if s.adapter is not None})
        waiting = sorted({s.adapter.name for s in self._waiting if s.adapter is not None})
        slots = self.adapters
        return LoRAStats(slots.max_loras, slots.max_cpu_loras, registered, slots.num_loaded, slots.active_names(),
                         running, waiting, slots.loads, round(slots.load_seconds, 4))

    # --- helpers ---------------------------------------------------------------

    def _stop_reason(self, seq: Sequence, token_id: int) -> FinishReason | None:
        if not seq.params.ignore_eos and token_id in self.limits.eos_token_ids:
            return FinishReason.STOP
        if token_id in seq.params.stop_token_ids:
            return FinishReason.STOP
        if seq.num_generated >= seq.params.max_new_tokens:
            return FinishReason.LENGTH
        if seq.num_tokens >= self.limits.max_model_len:
            return FinishReason.LENGTH
        return None

    def _finish(self, seq: Sequence, reason: FinishReason) -> None:
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        self._expect_sample.discard(seq.seq_id)
        if self.spec is not None:
            self.spec.forget(seq.seq_id)
        if self._running.pop(seq.seq_id, None) is None and seq in self._waiting:
            self._waiting.remove(seq)
        if seq.session_id and reason in (FinishReason.STOP, FinishReason.LENGTH):
            prompt_blocks = min(seq.num_registered, seq.num_prompt_tokens // self.kv.block_size)
            self.sessions.pin(seq.session_id, seq.blocks[:prompt_blocks])
        self.kv.free(seq)
        if seq.seen_by_worker:
            self._freed.append(seq.seq_id)

    @staticmethod
    def _final_update(seq: Sequence) -> SequenceUpdate:
        return SequenceUpdate(seq.seq_id, [], None, seq.finish_reason, seq.num_prompt_tokens, seq.num_cached_tokens)

    def _validate(self, request: AddSequence) -> None:
        limits = self.limits
        request.params.validate(limits.max_new_tokens_limit)
        request.check_prompt(limits.max_model_len, limits.vocab_size, self._kv_note())
        if request.seq_id in self._running or any(s.seq_id == request.seq_id for s in self._waiting):
            raise InvalidRequest(f"sequence {request.seq_id!r} is already in the engine")

    def _kv_note(self) -> str:
        kv = self.kv
        if kv.capacity_tokens > self.limits.max_model_len:
            return ""
        return (f"; the KV cache holds {kv.capacity_tokens} tokens ({kv.pool.num_usable} blocks of "
                f"{kv.block_size})")
