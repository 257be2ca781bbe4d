"""What serving looks like without an engine: the two baselines.

1. ``sequential_generate``: ``model.generate`` on one request at a time.
2. ``static_batching``: ``generate`` on batches of ``batch_size`` requests
   (left padding), each batch run to its end before the next starts.

``with_linear_backend`` gives the Hugging Face model the engine's projection
kernels (worker/linear.py) for a third, informative run: static batching on
the same kernels, which separates what scheduling gains from what kernels do.

Both take an already loaded Hugging Face model + tokenizer, the prompt texts
and ``max_new_tokens``; generation is greedy and always makes exactly
``max_new_tokens`` tokens (``min_new_tokens`` = ``max_new_tokens``, the
``ignore_eos`` of the engine runs). Requests arrive as from ``concurrency``
closed-loop clients (the engine benchmark's load); per-request TTFT and E2E
count from each request's arrival, so they include the wait behind earlier
requests or batches, as a client would see it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class BaselineResult:
    name: str
    output_tokens: int
    elapsed_s: float
    tokens_per_s: float
    ttft_s: list[float] = field(default_factory=list)  # per request
    e2e_s: list[float] = field(default_factory=list)  # per request

    def to_dict(self) -> dict:
        return asdict(self)


class _FirstTokenTimer:
    """A generate() streamer that notes when the first new token(s) came out."""

    def __init__(self):
        self._calls = 0
        self.first_token_at: float | None = None

    def put(self, value: Any) -> None:
        self._calls += 1
        if self._calls == 2 and self.first_token_at is None:  # call 1 is the prompt
            self.first_token_at = time.perf_counter()

    def end(self) -> None:
        pass


def _generate(model: Any, tokenizer: Any, prompts: list[str], max_new_tokens: int, streamer: _FirstTokenTimer) -> int:
    """Greedy, exactly ``max_new_tokens`` per prompt; returns the tokens made."""
    inputs = tokenizer(prompts, return_tensors="pt", padding=len(prompts) > 1)
    with torch.inference_mode():
        out = model.generate(
            **inputs,  # input_ids: [B, T] (left padded), attention_mask: [B, T]
            max_new_tokens=max_new_tokens,
            min_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
            streamer=streamer,
        )
    return (out.shape[1] - inputs["input_ids"].shape[1]) * out.shape[0]


def _prepare(tokenizer: Any) -> None:
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token


def sequential_generate(
    model: Any, tokenizer: Any, prompts: Sequence[str], max_new_tokens: int, concurrency: int = 16
) -> BaselineResult:
    """Baseline 1: one ``generate`` call per request, one after the other."""
    return _closed_loop("sequential generate", model, tokenizer, prompts, max_new_tokens, 1, concurrency)


def static_batching(
    model: Any, tokenizer: Any, prompts: Sequence[str], max_new_tokens: int,
    batch_size: int = 16, concurrency: int = 16,
) -> BaselineResult:
    """Baseline 2: batches of up to ``batch_size`` arrived requests, each run to its end."""
    name = f"static batching ({batch_size})"
    return _closed_loop(name, model, tokenizer, prompts, max_new_tokens, batch_size, concurrency)


def _closed_loop(
    name: str, model: Any, tokenizer: Any, prompts: Sequence[str], max_new_tokens: int,
    batch_size: int, concurrency: int,
) -> BaselineResult:
    """``concurrency`` clients, each sending its next request when its last one ended.

    Request i < concurrency arrives at the start; request i + concurrency
    arrives when request i ends. A batch takes the next arrived requests in
    order. TTFT and E2E count from each request's arrival (queueing included).
    """
    _prepare(tokenizer)
    n = len(prompts)
    arrival: list[float | None] = [0.0 if i < concurrency else None for i in range(n)]
    ttft, e2e = [0.0] * n, [0.0] * n
    tokens, next_index = 0, 0
    start = time.perf_counter()
    while next_index < n:
        batch = []
        while next_index < n and len(batch) < batch_size and arrival[next_index] is not None:
            batch.append(next_index)
            next_index += 1
        timer = _FirstTokenTimer()
        tokens += _generate(model, tokenizer, [prompts[i] for i in batch], max_new_tokens, timer)
        end = time.perf_counter() - start
        first = (timer.first_token_at - start) if timer.first_token_at else end
        for i in batch:
            ttft[i], e2e[i] = first - arrival[i], end - arrival[i]
            if i + concurrency < n:
                arrival[i + concurrency] = end
    elapsed = time.perf_counter() - start
    return BaselineResult(name, tokens, elapsed, tokens / elapsed, ttft, e2e)


class _KernelLinear(torch.nn.Module):
    """An ``nn.Linear`` replacement that runs one of worker.linear's kernels on [..., in]."""

    def __init__(self, linear: torch.nn.Linear, make_linear):
        super().__init__()
        self.kernel = make_linear(linear.weight, linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        return self.kernel(rows).reshape(*x.shape[:-1], self.kernel.out_features)


def with_linear_backend(model: Any, backend: str, batch_hint: int | None = None) -> Any:
    """``model`` with every ``nn.Linear`` running ``backend``'s kernel (in place; returned)."""
    from ..worker.linear import linear_factory, resolve_backend

    make_linear = linear_factory(resolve_backend(backend, model.device, model.dtype).name, batch_hint)
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(module, child_name, _KernelLinear(child, make_linear))
    return model


def load_hf_model(model_dir: str, dtype: torch.dtype = torch.float32) -> tuple[Any, Any]:
    """The model and tokenizer the baselines run (safetensors only, no remote code)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=dtype, use_safetensors=True, local_files_only=True
    ).eval()
    return model, tokenizer
