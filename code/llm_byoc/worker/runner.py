"""ModelRunner: the model, its paged KV cache and the per-sequence state; one step per call.

A step (see ``protocol.StepBatch``) first frees finished sequences, drops the
block tables of preempted ones (their sampling state stays: they will be
recomputed and go on as if never interrupted), registers new ones, appends
each chunk's new blocks to its sequence's table (a sequence's first chunk may
start after whole blocks of a cached prefix the engine hands over: those
blocks already hold its keys and values), then computes every scheduled
chunk in one batched forward and samples the rows that asked for a token. The
batch is checked against the runner's state before anything changes, so a bad
batch fails with a clear ``ValueError`` and leaves the state as it was; in
particular no two chunks of a step may write the same block.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace

import torch

from ..adapters.messages import AdapterLoadResult
from ..adapters.peft_folder import BaseShapes
from ..config import EngineConfig
from ..protocol import ScheduledChunk, StepBatch, StepOutput
from .attention import CASCADE_DEVICES
from .batch import build_step_inputs, order_chunks
from .draft import DraftProposer
from .kv_cache import PagedKVCache
from .kv_commit import KVCommitter
from .kv_sizing import KVCacheSize, bytes_per_token, size_kv_cache
from .loading import LoadedModel, load_model
from .lora import AdapterStore, LoRASlots, LoRAStep, build_lora_batch
from .prompt_logprobs import PromptLogprobsState
from .sampler import SequenceSampling, sample
from .speculative import sample_with_drafts
from .token_mask import apply_token_masks, check_masks

log = logging.getLogger(__name__)


@dataclass
class _Sequence:
    sampling: SequenceSampling
    adapter: str = ""  # LoRA adapter uid ("": the base model)
    blocks: list[int] = field(default_factory=list)  # block table: block i holds positions i*bs..
    num_cached: int = 0  # tokens whose keys/values are in the cache
    prompt: PromptLogprobsState | None = None  # only when it asked for prompt_logprobs


class ModelRunner:
    def __init__(self, loaded: LoadedModel, size: KVCacheSize, max_loras: int = 8, commit_kv: str = "lazy",
                 huge_pages: bool = True, draft: DraftProposer | None = None):
        self.decoder = loaded.decoder
        self.device = loaded.device
        self.vocab_size = loaded.info.vocab_size
        self.eos_token_ids = tuple(loaded.info.eos_token_ids)  # held back from sequences with min_tokens
        self.max_len = loaded.info.max_model_len
        self.block_size = size.block_size
        self.window = getattr(self.decoder, "sliding_window", None)  # its sliding-window layers' window, if any
        # every layer windowed: positions below the window are never read (the engine frees their blocks)
        self.all_windowed = self.window is not None and all(getattr(self.decoder, "sliding", (False,)))
        # chunks behind one cached prefix attend over it once, in layers over the whole context without capped scores
        self.cascade = (self.device.type in CASCADE_DEVICES and getattr(self.decoder, "attn_softcap", None) is None
                        and not all(getattr(self.decoder, "sliding", (False,))))
        self.rope_lengths = loaded.info.rope_by_length is not None  # rows need their sequence's length
        self.cache = PagedKVCache(
            self.decoder.num_layers, size.num_blocks, size.block_size, self.decoder.num_kv_heads,
            self.decoder.head_dim, loaded.dtype, loaded.device, commit=commit_kv, huge_pages=huge_pages,
        )
        self.committer = KVCommitter(self.cache) if self.cache.commit == "ahead" else None
        if self.committer is not None:
            self.committer.start()
        base = BaseShapes(loaded.info.model_type, self.decoder.num_layers, self.decoder.lora_modules(),
                          loaded.info.decoder)
        self.adapters = AdapterStore(base, loaded.dtype, getattr(self.decoder, "adapter_weights", None))
        self.lora_slots = LoRASlots(base, max_loras, loaded.dtype, loaded.device)
        self.info = replace(
            loaded.info, kv_block_size=size.block_size, num_kv_blocks=size.num_blocks,
            kv_bytes_per_token=size.bytes_per_token, num_layers=base.num_layers,
            lora_modules={name: list(features) for name, features in base.modules.items()},
            sliding_window=self.window, all_layers_windowed=self.all_windowed,
        )
        self._seqs: dict[str, _Sequence] = {}
        self.draft = draft  # draft-model speculation (LLM_BYOC_SPECULATIVE=draft): it proposes, this verifies

    @classmethod
    def from_config(cls, config: EngineConfig) -> "ModelRunner":
        loaded = load_model(config)
        decoder = loaded.decoder
        per_token = bytes_per_token(decoder.num_layers, decoder.num_kv_heads, decoder.head_dim, loaded.dtype)
        info = loaded.info
        draft = None
        if config.speculative_method == "draft":
            # before the KV cache is sized: its budget is what the draft's weights and pool leave (on CUDA the
            # pool is allocated whole, and gpu_memory_utilization bounds both models together)
            draft = DraftProposer.load(config, loaded, min(config.speculative_max_num_seqs, info.max_num_seqs),
                                       config.kv_block_size)
        size = size_kv_cache(config, per_token, info.max_model_len, info.max_num_seqs, loaded.device,
                             activation_peak=lambda: activation_peak(loaded, config))
        log.info("KV cache: %d blocks of %d tokens = %d tokens, %.2f GiB (%s)", size.num_blocks - 1,
                 size.block_size, (size.num_blocks - 1) * size.block_size, size.total_bytes / 1024**3, size.how)
        return cls(loaded, size, config.max_loras, commit_kv=config.kv_cache_commit,
                   huge_pages=config.kv_cache_huge_pages, draft=draft)

    @property
    def num_active(self) -> int:
        return len(self._seqs)

    def step(self, batch: StepBatch) -> StepOutput:
        started = time.perf_counter()
        self._free(batch.freed)
        adapter_results = self._adapter_changes(batch)  # each reports its own failure, before the check
        self._check(batch)
        if self.committer is not None and batch.chunks:
            self.committer.ensure(max((b for c in batch.chunks for b in c.block_ids), default=0))
        masks = check_masks(batch.step_id, batch.masks, self.vocab_size)
        for seq_id in batch.preempted:
            seq = self._seqs[seq_id]
            seq.blocks, seq.num_cached = [], 0
            if seq.prompt is not None:
                seq.prompt.restart()
        for new in batch.new:
            sampling = SequenceSampling.create(new.params, self.vocab_size, self.device, self.eos_token_ids)
            prompt = None if new.params.prompt_logprobs is None else PromptLogprobsState(new.params.prompt_logprobs)
            self._seqs[new.seq_id] = _Sequence(sampling, new.adapter, prompt=prompt)
        for chunk in batch.chunks:
            seq = self._seqs[chunk.seq_id]
            if not seq.blocks:  # new, or preempted: it may start after a cached prefix the engine handed over
                seq.num_cached = chunk.start_pos
            seq.blocks.extend(chunk.block_ids)
        chunks = batch.chunks
        if self.draft is not None:
            self.draft.on_step(batch)
            chunks = self.draft.with_proposals(chunks)
        samples = self._compute(chunks, masks) if chunks else []
        if self.draft is not None:
            self.draft.after_verify(samples)
        return StepOutput(batch.step_id, samples, time.perf_counter() - started, adapter_results)

    def _adapter_changes(self, batch: StepBatch) -> list[AdapterLoadResult]:
        for uid in batch.drop_adapters:
            self.adapters.drop(uid)
            self.lora_slots.clear(uid)
        results = []
        for spec in batch.load_adapters:
            try:
                weights = self.adapters.load(spec)
            except Exception as exc:  # noqa: BLE001 - a bad file fails its own load, not the step
                log.warning("adapter %s failed to load: %s", spec.name, exc)
                results.append(AdapterLoadResult(spec.uid, False, f"{type(exc).__name__}: {exc}"))
                continue
            results.append(AdapterLoadResult(spec.uid, True, "", weights.nbytes, round(weights.load_seconds, 4)))
        for activation in batch.activate_adapters:
            if activation.uid in self.adapters:  # a failed load was reported above
                self.lora_slots.activate(activation.slot, self.adapters.get(activation.uid))
        return results

    def _free(self, seq_ids: list[str]) -> None:
        for seq_id in seq_ids:
            self._seqs.pop(seq_id, None)  # freeing twice (or an unknown id) is harmless

    # --- the contract ----------------------------------------------------------------

    def _check(self, batch: StepBatch) -> None:
        new_ids = [n.seq_id for n in batch.new]
        if len(set(new_ids)) != len(new_ids) or any(s in self._seqs for s in new_ids):
            raise ValueError(f"step {batch.step_id}: a new sequence id is already in use")
        inactive = [n.adapter for n in batch.new if n.adapter and self.lora_slots.slot_of(n.adapter) is None]
        if inactive:
            raise ValueError(f"step {batch.step_id}: adapter {inactive[0]!r} is not in a LoRA slot")
        unknown = [s for s in batch.preempted if s not in self._seqs]
        if unknown:
            raise ValueError(f"step {batch.step_id}: preempted unknown sequence {unknown[0]!r}")
        if self.draft is not None:
            self.draft.check(batch)
        restarted = set(new_ids) | set(batch.preempted)
        seen: set[str] = set()
        written: dict[int, str] = {}
        for chunk in batch.chunks:
            if chunk.seq_id not in self._seqs and chunk.seq_id not in restarted:
                raise ValueError(f"step {batch.step_id}: unknown sequence {chunk.seq_id!r}")
            if chunk.seq_id in seen:
                raise ValueError(f"step {batch.step_id}: two chunks for sequence {chunk.seq_id!r}")
            seen.add(chunk.seq_id)
            seq = None if chunk.seq_id in restarted else self._seqs[chunk.seq_id]
            table = (seq.blocks if seq else []) + list(chunk.block_ids)
            if seq is None or not seq.blocks:  # a first chunk may start after whole blocks of cached prefix
                cached = chunk.start_pos if chunk.start_pos % self.block_size == 0 else 0
            else:
                cached = seq.num_cached
            self._check_chunk(batch.step_id, chunk, cached, table)
            for index in range(chunk.start_pos // self.block_size,
                               (chunk.start_pos + len(chunk.token_ids) + chunk.num_propose - 1) // self.block_size + 1):
                owner = written.setdefault(table[index], chunk.seq_id)
                if owner != chunk.seq_id:
                    raise ValueError(f"step {batch.step_id}: {owner!r} and {chunk.seq_id!r} both write "
                                     f"block {table[index]}")

    def _check_chunk(self, step_id: int, chunk: ScheduledChunk, cached: int, table: list[int]) -> None:
        if chunk.start_pos != cached:
            raise ValueError(
                f"step {step_id}: chunk for {chunk.seq_id!r} starts at {chunk.start_pos}, "
                f"but {cached} tokens are cached"
            )
        if not chunk.token_ids:
            raise ValueError(f"step {step_id}: empty chunk for {chunk.seq_id!r}")
        if chunk.num_draft and not (chunk.sample and 0 < chunk.num_draft < len(chunk.token_ids)):
            raise ValueError(f"step {step_id}: chunk for {chunk.seq_id!r} has {chunk.num_draft} proposals "
                             f"in {len(chunk.token_ids)} tokens")
        if chunk.num_propose and (self.draft is None or chunk.num_draft or not chunk.sample):
            raise ValueError(f"step {step_id}: chunk for {chunk.seq_id!r} asks for {chunk.num_propose} proposals"
                             + (" without a draft model" if self.draft is None else " and is not a plain decode"))
        end = chunk.start_pos + len(chunk.token_ids) + chunk.num_propose
        if end > self.max_len:
            raise ValueError(
                f"step {step_id}: sequence {chunk.seq_id!r} would exceed the context of {self.max_len} tokens"
            )
        if not all(isinstance(t, int) and 0 <= t < self.vocab_size for t in chunk.token_ids):
            raise ValueError(f"step {step_id}: token id out of range [0, {self.vocab_size}) in {chunk.seq_id!r}")
        if not all(isinstance(b, int) and 0 < b < self.cache.num_blocks for b in chunk.block_ids):
            raise ValueError(f"step {step_id}: block id out of range [1, {self.cache.num_blocks}) "
                             f"for {chunk.seq_id!r}")
        if len(table) * self.block_size < end:
            raise ValueError(f"step {step_id}: {chunk.seq_id!r} has {len(table)} blocks, too few for "
                             f"{end} tokens")

    # --- the forward ----------------------------------------------------------------------

    def _compute(self, chunks: list[ScheduledChunk], masks: dict[str, bytes]) -> list:
        ordered = order_chunks(chunks, self._lora_slot)
        tables = {c.seq_id: self._seqs[c.seq_id].blocks for c in ordered}
        inputs = build_step_inputs(ordered, tables, self.block_size, self.device, self.cascade, self.rope_lengths,
                                   self.window, self.all_windowed)
        lora = self._lora_step(ordered, inputs)
        with torch.inference_mode():
            hidden = self.decoder.forward(inputs, self.cache, lora)  # [T, hidden]
            logits = self.decoder.logits(hidden[inputs.sample_rows])  # [S, V]
            for chunk in ordered:
                seq = self._seqs[chunk.seq_id]
                seq.num_cached += len(chunk.token_ids)
                if seq.sampling.seen is not None:
                    seq.sampling.observe(torch.tensor(chunk.token_ids, device=self.device))
            apply_token_masks(logits, inputs.sample_seq_ids, masks)  # constrained rows (structured output)
            states = {seq_id: self._seqs[seq_id].sampling for seq_id in inputs.sample_seq_ids}
            drafts = {c.seq_id: c.token_ids[-c.num_draft:] for c in ordered if c.num_draft}
            if not drafts:
                return self._with_prompt_logprobs(ordered, hidden, sample(logits, inputs.sample_seq_ids, states))
            samples = sample_with_drafts(logits, inputs.sample_seq_ids, states, drafts)
            for chunk in ordered:  # rejected proposals: their keys and values are dropped (the engine does too)
                if chunk.num_draft:
                    seq = self._seqs[chunk.seq_id]
                    accepted = sum(1 for s in samples if s.seq_id == chunk.seq_id) - 1
                    seq.num_cached = chunk.start_pos + 1 + accepted
                    del seq.blocks[-(-seq.num_cached // self.block_size):]
            return self._with_prompt_logprobs(ordered, hidden, samples)

    def _with_prompt_logprobs(self, ordered: list[ScheduledChunk], hidden: torch.Tensor, samples: list) -> list:
        """Gather the prompt log-probabilities of the sequences that asked (their chunks' every row), and
        hand them over with each one's first sample."""
        row, finished = 0, {}
        for chunk in ordered:  # rows in the order build_step_inputs laid them out
            prompt = self._seqs[chunk.seq_id].prompt
            if prompt is not None and not prompt.done:
                rows = torch.arange(row, row + len(chunk.token_ids), device=hidden.device)
                prompt.add_chunk(lambda r: self.decoder.logits(hidden[r]), rows, chunk.token_ids, chunk.sample)
                if prompt.done:
                    finished[chunk.seq_id] = prompt.result()
            row += len(chunk.token_ids)
        if not finished:
            return samples
        return [replace(s, prompt=finished[s.seq_id]) if s.seq_id in finished else s for s in samples]

    def _lora_slot(self, seq_id: str) -> int:
        """The LoRA slot a sequence's rows use; -1: the base model."""
        uid = self._seqs[seq_id].adapter
        found = self.lora_slots.slot_of(uid) if uid else None
        return -1 if found is None else found

    def _lora_step(self, ordered: list[ScheduledChunk], inputs) -> LoRAStep | None:
        """Which rows use which LoRA slot (None: the fast path, no adapter in this step)."""
        row_slots: list[int] = []
        chunks: list[tuple[int, int, int]] = []
        for chunk in ordered:  # rows in the order build_step_inputs laid them out
            chunk_slot, row = self._lora_slot(chunk.seq_id), len(row_slots)
            row_slots.extend([chunk_slot] * len(chunk.token_ids))
            if len(chunk.token_ids) > 1:
                chunks.append((row, len(row_slots), chunk_slot))
        batch = build_lora_batch(row_slots, chunks, self.cache.k[0].dtype, self.device)
        return None if batch is None else LoRAStep(self.lora_slots, batch)


def profile_step(loaded: LoadedModel, config: EngineConfig) -> None:
    """Run the largest step the engine schedules (one ``max_batched_tokens`` chunk, logits for
    ``max_num_seqs`` rows) on a scratch cache."""
    decoder, size = loaded.decoder, config.kv_block_size
    tokens = min(config.max_batched_tokens, loaded.info.max_model_len)
    blocks = list(range(1, -(-tokens // size) + 1))
    scratch = PagedKVCache(decoder.num_layers, len(blocks) + 1, size, decoder.num_kv_heads, decoder.head_dim,
                           loaded.dtype, loaded.device)
    chunk = ScheduledChunk("profile", [0] * tokens, 0, True, blocks)
    inputs = build_step_inputs([chunk], {"profile": blocks}, size, loaded.device,
                               rope_lengths=loaded.info.rope_by_length is not None,
                               window=getattr(decoder, "sliding_window", None))
    with torch.inference_mode():
        hidden = decoder.forward(inputs, scratch)
        decoder.logits(hidden[: loaded.info.max_num_seqs])


def activation_peak(loaded: LoadedModel, config: EngineConfig) -> int:
    """Bytes a step's activations take on the GPU beyond what is allocated now (CUDA only)."""
    device = loaded.device
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    profile_step(loaded, config)
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before
    torch.cuda.empty_cache()
    return max(0, peak)
