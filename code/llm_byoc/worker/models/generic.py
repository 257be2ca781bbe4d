"""The generic transformers path: any decoder whose transformers code calls attention through
``AttentionInterface`` runs on our paged KV cache (as vLLM's "Transformers backend" does).

The model's own modules compute everything but attention: embeddings, norms, RoPE
(from each token's own position), MLPs, the final norm and the LM head. Every
attention call lands in ``paged_attention_function``, registered once under
``ATTENTION_NAME``; it writes the layer's keys and values into our paged cache and
attends with ``worker.attention`` over the step's block tables, so prefix caching,
chunked prefill, preemption and token masks work as on the native decoders. One
step is one call of the model on the packed tokens, ``[1, T]`` with per-token
``position_ids``: transformers builds no mask for an attention function it does not
know, and ours needs none (``StepInputs`` says which keys each row sees).

``build_generic`` probes the model once on a few tokens before it serves: every
layer must call the interface once, with one head size for keys and values, and
nothing our attention does not compute (logit soft-capping, a sliding window
shorter than the context, attention sinks); the LM head plus the final logit
processing we apply must give the model's own logits.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ...errors import ModelLoadError
from ..attention import paged_attention
from ..batch import StepInputs
from ..kv_cache import PagedKVCache

ATTENTION_NAME = "llm_byoc_paged"
PATH_NAME = "generic transformers path"
_PER_BATCH_ROPE = ("dynamic", "longrope")  # rescaled by the longest sequence in the packed step
_PROBE_TOKENS = 5

_STEP: contextvars.ContextVar = contextvars.ContextVar("llm_byoc_generic_step")


def paged_attention_function(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention signature: query [1, H, T, D], key/value [1, KVH, T, D] -> ([1, T, H, D], None)."""
    step = _STEP.get(None)
    if step is None:
        raise RuntimeError(f"attention {ATTENTION_NAME!r} runs only inside a GenericDecoder step")
    return step.attend(module, query, key, value, scaling, kwargs), None


def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, paged_attention_function)


@dataclass
class _PagedStep:
    """One step: each layer's keys/values into ``cache``, attention over ``inputs``' block tables."""

    inputs: StepInputs
    cache: PagedKVCache

    def attend(self, module, query, key, value, scaling, extra) -> torch.Tensor:
        index = module.layer_idx
        q = query[0].transpose(0, 1)  # [T, H, D]
        dim = q.shape[-1]
        if scaling is not None and not math.isclose(scaling, dim**-0.5, rel_tol=1e-6):
            q = q * (scaling * math.sqrt(dim))  # SDPA divides by sqrt(D) again: the model's own scale in the end
        out = paged_attention(q.contiguous(), key[0].transpose(0, 1).contiguous(),
                              value[0].transpose(0, 1).contiguous(), self.cache.k[index], self.cache.v[index],
                              self.inputs)  # [T, H, D]
        return out[None]


@dataclass
class _Probe:
    """A load-time forward on a few tokens: plain causal attention, and what each layer's call looked like."""

    max_len: int
    calls: list[tuple] = field(default_factory=list)  # (layer index, H, KVH, key dim, value dim)
    refused: list[str] = field(default_factory=list)

    def attend(self, module, query, key, value, scaling, extra) -> torch.Tensor:
        self.calls.append((getattr(module, "layer_idx", None), query.shape[1], key.shape[1], key.shape[-1],
                           value.shape[-1]))
        if extra.get("softcap") is not None:
            self.refused.append(f"attention logit soft-capping ({extra['softcap']})")
        if extra.get("s_aux") is not None or extra.get("sinks") is not None:
            self.refused.append("attention sinks")
        window = extra.get("sliding_window")
        if window is not None and 0 < window < self.max_len:
            self.refused.append(f"sliding-window attention ({window} tokens; set LLM_BYOC_MAX_MODEL_LEN <= {window})")
        if extra.get("is_causal") is False or getattr(module, "is_causal", True) is False:
            self.refused.append("non-causal attention")
        out = F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scaling,
                                             enable_gqa=query.shape[1] != key.shape[1])
        return out.transpose(1, 2)  # [1, T, H, D]


@contextlib.contextmanager
def _running(step):
    token = _STEP.set(step)
    try:
        yield
    finally:
        _STEP.reset(token)


def check_generic_config(config, max_model_len: int) -> None:
    """ModelLoadError, before any weight is read, for what the generic path cannot run exactly."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    model_type = getattr(config, "model_type", None)
    if type(config) in MODEL_FOR_CAUSAL_LM_MAPPING:  # a remote-code class is checked once it is loaded
        check_attention_backend(MODEL_FOR_CAUSAL_LM_MAPPING[type(config)], model_type)
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    kinds = {rope.get("rope_type", rope.get("type"))} if isinstance(rope, dict) else set()
    if isinstance(rope, dict) and all(isinstance(v, dict) for v in rope.values()):  # per layer type
        kinds = {v.get("rope_type") for v in rope.values()}
    per_batch = sorted(k for k in kinds if k in _PER_BATCH_ROPE)
    if per_batch:
        raise ModelLoadError(f"rope type {per_batch[0]!r} rescales by the longest sequence in a batch, which a "
                             f"continuously batched step cannot reproduce; the {PATH_NAME} does not run it")
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None) or ()
    if "sliding_attention" in layer_types and isinstance(window, int) and window < max_model_len:
        raise ModelLoadError(f"{model_type} sliding-window attention ({window}) is not supported on the "
                             f"{PATH_NAME}; set LLM_BYOC_MAX_MODEL_LEN <= {window}")


def check_attention_backend(model_class, model_type) -> None:
    if not model_class.is_backend_compatible():
        raise ModelLoadError(
            f"model type {model_type!r} has no native decoder here, and its transformers code "
            f"({model_class.__name__}) does not support a custom attention function (no "
            f"_supports_attention_backend), which the {PATH_NAME} needs; LLM_BYOC_ENGINE=vllm may serve it"
        )


class GenericDecoder:
    """``forward`` -> the model's final hidden states [T, hidden]; ``logits`` via its LM head."""

    def __init__(self, hf_model, num_layers: int, num_heads: int, num_kv_heads: int, head_dim: int):
        self.model = hf_model
        self.body = hf_model.base_model  # embeddings, layers and final norm
        self.head = hf_model.get_output_embeddings()
        self.num_layers, self.num_heads = num_layers, num_heads
        self.num_kv_heads, self.head_dim = num_kv_heads, head_dim
        config = hf_model.config
        self.softcap = getattr(config, "final_logit_softcapping", None)  # gemma 2/3
        self.logit_scale = getattr(config, "logit_scale", None)  # cohere multiplies
        self.logits_scaling = getattr(config, "logits_scaling", None)  # granite divides

    def lora_modules(self) -> dict[str, tuple[int, int]]:
        """None offered: the generic path does not take LoRA adapters."""
        return {}

    def forward(self, inputs: StepInputs, cache: PagedKVCache, lora=None) -> torch.Tensor:
        with _running(_PagedStep(inputs, cache)):
            return self._hidden(inputs.token_ids, inputs.positions)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """h: [S, hidden] -> [S, V] float32, as the model's causal-LM forward computes them."""
        logits = self.head(h)
        if self.logit_scale is not None:
            logits = logits * self.logit_scale
        if self.logits_scaling is not None:
            logits = logits / self.logits_scaling
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits.float()

    def _hidden(self, token_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        out = self.body(input_ids=token_ids[None], position_ids=positions[None], use_cache=False)  # [1, T, hidden]
        return out.last_hidden_state[0]


def build_generic(hf_model, max_model_len: int) -> GenericDecoder:
    """A GenericDecoder on a loaded transformers model: our attention set on it, then checked by a probe."""
    model_type = hf_model.config.model_type
    check_attention_backend(type(hf_model), model_type)
    if hf_model.get_output_embeddings() is None or hf_model.base_model is hf_model:
        raise ModelLoadError(f"{type(hf_model).__name__} is not a base model under an LM head; the {PATH_NAME} "
                             "needs both")
    _register()
    hf_model.set_attn_implementation(ATTENTION_NAME)
    if hf_model.config._attn_implementation != ATTENTION_NAME:
        raise ModelLoadError(f"{type(hf_model).__name__} does not take a custom attention function")
    probe = _Probe(max_model_len)
    device = next(hf_model.parameters()).device
    pad = getattr(hf_model.config, "pad_token_id", None)  # a pad id in the input makes some models warn
    ids = torch.tensor([i for i in range(_PROBE_TOKENS + 1) if i != pad][:_PROBE_TOKENS], device=device)
    positions = torch.arange(_PROBE_TOKENS, device=device)
    with torch.inference_mode(), _running(probe):
        decoder = GenericDecoder(hf_model, 0, 0, 0, 0)
        ours = decoder.logits(decoder._hidden(ids, positions))
        calls = list(probe.calls)
        full = hf_model(input_ids=ids[None], position_ids=positions[None], use_cache=False).logits[0].float()
    _check_probe(model_type, calls, probe.refused)
    if not torch.allclose(ours, full, rtol=1e-3, atol=1e-3):
        raise ModelLoadError(f"{model_type}'s logits are not its LM head's output (with soft-capping or scaling "
                             f"as its config sets them): the {PATH_NAME} does not reproduce them")
    _, heads, kv_heads, key_dim, _ = calls[0]
    return GenericDecoder(hf_model, len(calls), heads, kv_heads, key_dim)


def _check_probe(model_type: str, calls: list[tuple], refused: list[str]) -> None:
    if not calls:
        raise ModelLoadError(f"{model_type}'s modules never called the attention interface; the {PATH_NAME} "
                             "cannot run it")
    if refused:
        raise ModelLoadError(f"{model_type} uses {sorted(set(refused))[0]}, which the {PATH_NAME} does not compute")
    indices = [call[0] for call in calls]
    if indices != list(range(len(calls))):
        raise ModelLoadError(f"{model_type}'s attention layers are not called once each in order by layer_idx "
                             f"({indices[:8]}); the {PATH_NAME} cannot give each its cache")
    shapes = {call[1:] for call in calls}
    if len(shapes) != 1:
        raise ModelLoadError(f"{model_type}'s layers differ in heads or head size ({sorted(shapes)}); "
                             f"the {PATH_NAME} keeps one cache shape for all layers")
    _, heads, kv_heads, key_dim, value_dim = calls[0]
    if key_dim != value_dim or heads % kv_heads:
        raise ModelLoadError(f"{model_type}'s attention has key size {key_dim}, value size {value_dim}, {heads} "
                             f"query heads over {kv_heads} KV heads; the {PATH_NAME} needs equal sizes and a "
                             "whole number of query heads per KV head")
