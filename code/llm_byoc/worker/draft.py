"""Draft-model speculation, worker side: a small model with the target's vocabulary proposes the tokens
that the target verifies in the same step (``worker/speculative.py``).

Why in the model worker, not in the engine process like the n-gram proposer: a draft is a model, with
weights, a KV cache and forwards on the accelerator; the engine process holds no tensors and a proposer
there would cost a second model process and a round trip per step. Here the scheduler only says how
many tokens a sequence may have proposed (``ScheduledChunk.num_propose``, its target blocks reserved),
and the proposals never leave the worker: only the accepted ones come back, as sampled tokens.

Greedy drafts: a proposal is the draft's argmax, a one-hot q. The verifier's rule (draw y from the
target's p, accept the proposal x while y == x) is then exactly the rejection rule min(1, p(x)/q(x)) =
p(x), with p less x renormalised on rejection, so the output distribution is the target's, greedy
output is token for token the one without speculation, and the target's generator still draws once per
generated token: a seeded output is the same with speculation on or off. (Drafts sampled from q accept
more at high temperatures, but need their own random stream and would make seeded outputs depend on
speculation.)

Its KV cache is its own small paged pool. Per sequence it keeps every token the worker has seen (chunks,
accepted proposals, and the cached prefix a first chunk starts after, ``NewSequence.prefix_token_ids``)
and how many of them its cache holds. A step's proposals: one batched forward over each proposing
sequence's tokens it has not computed yet (the whole prompt the first time; afterwards the target's last
token), then k - 1 steps of one row per sequence. Rollback follows the target: the accepted proposals
stay in its cache, rejected ones are overwritten later; a chunk that starts earlier (recomputation)
cuts its cached length there. Preempted: its blocks go back (tokens kept); finished: all dropped. When
the pool is short, sequences not proposing in this step lose their draft blocks (recomputed when they
next propose); it holds ``max_seqs`` sequences of the whole context, so proposers always fit.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from ..config import ENV_DRAFT_MODEL, EngineConfig
from ..errors import ModelLoadError
from ..protocol import ScheduledChunk, StepBatch
from .batch import build_step_inputs, order_chunks
from .kv_cache import PagedKVCache
from .loading import LoadedModel, load_model
from .sampler import argmax_rows

log = logging.getLogger(__name__)


@dataclass
class _DraftSequence:
    tokens: list[int] = field(default_factory=list)  # every token of the sequence the worker has seen
    blocks: list[int] = field(default_factory=list)  # its block table in the draft's pool
    num_cached: int = 0  # tokens[:num_cached] have their keys and values in the draft's cache
    proposed: list[int] = field(default_factory=list)  # this step's proposals (all but the last are cached)
    last_used: int = 0  # the step it last proposed in (the pool evicts the least recent first)

    @property
    def num_known(self) -> int:
        """Tokens known from the start: none when it began after a prefix the draft was not told (-1s)."""
        return 0 if self.tokens[:1] == [-1] else len(self.tokens)


class DraftProposer:
    def __init__(self, loaded: LoadedModel, max_seqs: int, max_len: int, block_size: int):
        self.decoder = loaded.decoder
        self.device = loaded.device
        self.block_size = block_size
        self.window = getattr(self.decoder, "sliding_window", None)
        self.all_windowed = self.window is not None and all(getattr(self.decoder, "sliding", (False,)))
        num_blocks = max_seqs * (-(-(max_len + 1) // block_size)) + 1  # + the null block
        # lazy: pages are committed as proposals first write them, so memory at rest is the weights alone
        self.cache = PagedKVCache(self.decoder.num_layers, num_blocks, block_size, self.decoder.num_kv_heads,
                                  self.decoder.head_dim, loaded.dtype, loaded.device, commit="lazy")
        self._free = list(range(num_blocks - 1, 0, -1))  # popped from the end: low ids first
        self._seqs: dict[str, _DraftSequence] = {}
        self._step = 0
        log.info("draft model: %s, %d layers; its KV pool %d blocks of %d (%.2f GiB reserved)",
                 loaded.info.model_path, self.decoder.num_layers, num_blocks - 1, block_size,
                 self.cache.total_bytes / 1024**3)

    @classmethod
    def load(cls, config: EngineConfig, target: LoadedModel, max_seqs: int, block_size: int) -> "DraftProposer":
        """``config.draft_model`` loaded like the target (device, dtype), checked to share its vocabulary."""
        target_len = target.info.max_model_len
        try:
            loaded = load_model(replace(config, model=config.draft_model, max_model_len=target_len,
                                        decoder="auto"))
        except ModelLoadError as exc:
            raise ModelLoadError(f"{ENV_DRAFT_MODEL}={config.draft_model}: {exc}") from None
        check_same_vocabulary(target.info.model_path, target.info.vocab_size, loaded.info.model_path,
                              loaded.info.vocab_size)
        if loaded.info.rope_by_length is not None:
            raise ModelLoadError(f"{ENV_DRAFT_MODEL}: a draft whose RoPE depends on the sequence's length "
                                 f"({loaded.info.rope_by_length.kind}) is not supported")
        return cls(loaded, max_seqs, target_len, block_size)

    # --- following the target's sequences ------------------------------------------------

    def check(self, batch: StepBatch) -> None:
        """Proposals only for sequences whose every token the draft knows (raises ValueError)."""
        prefix = {new.seq_id: len(new.prefix_token_ids) for new in batch.new}
        for chunk in batch.chunks:
            seq = self._seqs.get(chunk.seq_id)
            known = prefix[chunk.seq_id] if chunk.seq_id in prefix else seq.num_known if seq else 0
            if chunk.num_propose and chunk.start_pos > known:
                raise ValueError(f"step {batch.step_id}: chunk for {chunk.seq_id!r} starts at {chunk.start_pos}, "
                                 f"after the {known} tokens the draft model knows")

    def on_step(self, batch: StepBatch) -> None:
        """Follow the batch: finished sequences dropped, preempted ones' blocks freed, new ones and every
        chunk's tokens recorded."""
        for seq_id in batch.freed:
            self._release(self._seqs.pop(seq_id, None))
        for seq_id in batch.preempted:
            self._release(self._seqs.get(seq_id))
        for new in batch.new:
            self._seqs[new.seq_id] = _DraftSequence(tokens=list(new.prefix_token_ids))
        for chunk in batch.chunks:
            seq = self._seqs[chunk.seq_id]
            if chunk.start_pos > seq.num_known:  # after a cached prefix it was not told (never asked to propose)
                seq.tokens = [-1] * chunk.start_pos
            seq.tokens[chunk.start_pos:] = chunk.token_ids
            seq.num_cached = min(seq.num_cached, chunk.start_pos)

    def with_proposals(self, chunks: list[ScheduledChunk]) -> list[ScheduledChunk]:
        """``chunks``, each one that asks for proposals now carrying them as its last ``num_draft`` tokens."""
        asks = {c.seq_id: c.num_propose for c in chunks if c.num_propose}
        if not asks:
            return chunks
        proposals = self.propose(asks)
        return [replace(c, token_ids=c.token_ids + proposals[c.seq_id], num_draft=c.num_propose, num_propose=0)
                if c.num_propose else c for c in chunks]

    def after_verify(self, samples: list) -> None:
        """The target's answer: a proposing sequence keeps the proposals it accepted (len(samples) - 1)."""
        counts: dict[str, int] = {}
        for sample in samples:
            counts[sample.seq_id] = counts.get(sample.seq_id, 0) + 1
        for seq_id, seq in self._seqs.items():
            if seq.proposed:
                accepted = counts.get(seq_id, 1) - 1
                seq.num_cached += min(accepted, len(seq.proposed) - 1)  # the last proposal was never computed
                seq.tokens.extend(seq.proposed[:accepted])
                seq.proposed = []

    # --- proposing ----------------------------------------------------------------------------

    def propose(self, asks: dict[str, int]) -> dict[str, list[int]]:
        """seq id -> k: k greedy tokens of the draft after each sequence's tokens."""
        self._step += 1
        seqs = {seq_id: self._seqs[seq_id] for seq_id in asks}
        for seq_id, seq in seqs.items():
            seq.num_cached = min(seq.num_cached, len(seq.tokens) - 1)  # the last token is always computed
            seq.last_used = self._step
            self._grow(seq, len(seq.tokens) + asks[seq_id] - 1, set(asks))
        # the tokens it has not computed yet, all sequences in one forward: [sum of their lengths] rows
        chunks = [ScheduledChunk(seq_id, seq.tokens[seq.num_cached:], seq.num_cached, True)
                  for seq_id, seq in seqs.items()]
        picked = self._forward(chunks)
        for seq_id, seq in seqs.items():
            seq.num_cached = len(seq.tokens)
            seq.proposed = [picked[seq_id]]
        for i in range(1, max(asks.values())):  # then one row per sequence that wants more: [B] rows
            chunks = [ScheduledChunk(seq_id, [seq.proposed[-1]], len(seq.tokens) + i - 1, True)
                      for seq_id, seq in seqs.items() if asks[seq_id] > i]
            for seq_id, token in self._forward(chunks).items():
                seqs[seq_id].proposed.append(token)
        return {seq_id: list(seq.proposed) for seq_id, seq in seqs.items()}

    def _forward(self, chunks: list[ScheduledChunk]) -> dict[str, int]:
        """Compute ``chunks`` into the draft's cache; each sequence's argmax after its last row."""
        ordered = order_chunks(chunks)
        tables = {c.seq_id: self._seqs[c.seq_id].blocks for c in ordered}
        inputs = build_step_inputs(ordered, tables, self.block_size, self.device, window=self.window,
                                   all_windowed=self.all_windowed)
        with torch.inference_mode():
            hidden = self.decoder.forward(inputs, self.cache)  # [T, hidden]
            logits = self.decoder.logits(hidden[inputs.sample_rows])  # [S, V]
            tokens = argmax_rows(logits)
        return dict(zip(inputs.sample_seq_ids, tokens))

    def _grow(self, seq: _DraftSequence, num_tokens: int, keep: set[str]) -> None:
        """Blocks for ``num_tokens`` positions; when the pool is short, sequences not in ``keep`` give theirs up,
        least recently proposing first."""
        need = -(-num_tokens // self.block_size) - len(seq.blocks)
        if need <= 0:
            return
        victims = sorted((s for i, s in self._seqs.items() if i not in keep and s.blocks), key=lambda s: s.last_used)
        while len(self._free) < need and victims:
            self._release(victims.pop(0))
        if len(self._free) < need:  # the pool holds max_seqs whole contexts: only a broken contract gets here
            raise RuntimeError(f"the draft model's KV pool is short of {need - len(self._free)} blocks")
        seq.blocks.extend(self._free.pop() for _ in range(need))

    def _release(self, seq: _DraftSequence | None) -> None:
        if seq is not None:
            self._free.extend(reversed(seq.blocks))
            seq.blocks, seq.num_cached, seq.proposed = [], 0, []


def check_same_vocabulary(target_path: str, target_vocab: int, draft_path: str, draft_vocab: int) -> None:
    """The draft's token ids must mean the target's: the same vocabulary size and, where both folders hold a
    ``tokenizer.json``, the same token -> id table."""
    if draft_vocab != target_vocab:
        raise ModelLoadError(f"{ENV_DRAFT_MODEL}: the draft model's vocabulary has {draft_vocab} tokens, the "
                             f"model's {target_vocab}; a draft must share the model's tokenizer")
    tables = [_tokenizer_vocab(Path(p)) for p in (target_path, draft_path)]
    if None not in tables and tables[0] != tables[1]:
        different = next((t for t, i in tables[0].items() if tables[1].get(t) != i), "?")
        raise ModelLoadError(f"{ENV_DRAFT_MODEL}: the draft model's tokenizer is not the model's (token "
                             f"{different!r} has another id); a draft must share the model's tokenizer")


def _tokenizer_vocab(folder: Path) -> dict | None:
    try:
        data = json.loads((folder / "tokenizer.json").read_text())
    except (OSError, ValueError):
        return None
    vocab = (data.get("model") or {}).get("vocab")
    added = {t.get("content"): t.get("id") for t in data.get("added_tokens") or []}
    return {**vocab, **added} if isinstance(vocab, dict) else None
