"""Text embedding and text classification with transformers on PyTorch.

Weights load from safetensors only and ``trust_remote_code`` stays off, so a
model folder can never run code of its own. Embeddings follow the
sentence-transformers folder when there is one (pooling mode from
``1_Pooling/config.json``, L2 normalisation when ``modules.json`` lists a
Normalize module); a plain encoder gets mean pooling + normalisation.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ...cpu import default_num_threads
from ...errors import ModelLoadError
from ..messages import InvokeReply, InvokeRequest
from ..store import ModelSpec, module_entries, path_inside
from .base import int_option, json_reply, parse_json_body, text_inputs

log = logging.getLogger(__name__)

MAX_TEXTS_PER_REQUEST = 64


def _require_safetensors(folder: Path) -> None:
    if not any(folder.glob("*.safetensors")):
        raise ModelLoadError(f"{folder.name}: no *.safetensors weights (other formats are refused)")


def _load(spec: ModelSpec, model_class_name: str, num_threads: int):
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(default_num_threads(num_threads))
    folder = Path(spec.path)
    _require_safetensors(folder)
    model_class = getattr(transformers, model_class_name)
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
        model = model_class.from_pretrained(folder, use_safetensors=True, trust_remote_code=False)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise ModelLoadError(f"cannot load {spec.name!r}: {exc}") from None
    return tokenizer, model.eval()


def _pooling(folder: Path) -> tuple[str, bool]:
    """(pooling mode, normalize) from a sentence-transformers folder; mean + normalize otherwise."""
    if not (folder / "modules.json").is_file():
        return "mean", True
    modules = module_entries(folder)
    normalize = any(str(m.get("type", "")).endswith("Normalize") for m in modules)
    mode = "mean"
    for module in modules:
        if str(module.get("type", "")).endswith("Pooling"):
            pooling_file = path_inside(folder, module.get("path") or ".", "a modules.json path") / "config.json"
            if pooling_file.is_file() and json.loads(pooling_file.read_text()).get("pooling_mode_cls_token"):
                mode = "cls"
    return mode, normalize


class TextEmbeddingHandler:
    max_concurrency = 1

    def __init__(self, spec: ModelSpec, num_threads: int = 0):
        self.tokenizer, self.model = _load(spec, "AutoModel", num_threads)
        self.mode, self.normalize = _pooling(Path(spec.path))
        self.max_length = min(int(self.tokenizer.model_max_length or 512), 512)

    def embed(self, texts: list[str]) -> list[list[float]]:
        import torch

        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        with torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state  # [B, T, H]
        if self.mode == "cls":
            pooled = hidden[:, 0]
        else:
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # [B, T, 1]
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # [B, H]
        if self.normalize:
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return pooled.tolist()

    def invoke(self, invocation: InvokeRequest, body: bytes) -> tuple[InvokeReply, bytes]:
        return json_reply({"embeddings": self.embed(embedding_request(invocation, body))})

    def close(self) -> None:
        self.model = None


def embedding_request(invocation: InvokeRequest, body: bytes) -> list[str]:
    texts, _ = text_inputs(parse_json_body(invocation, body), MAX_TEXTS_PER_REQUEST)
    return texts


def classification_request(invocation: InvokeRequest, body: bytes) -> tuple[list[str], int]:
    """(texts, top_k) of a classification request; 400/415 for bad input."""
    payload = parse_json_body(invocation, body)
    texts, _ = text_inputs(payload, MAX_TEXTS_PER_REQUEST)
    params = payload.get("parameters") or {}
    raw_top_k = params.get("top_k") if isinstance(params, dict) else None
    return texts, int_option("top_k", raw_top_k or invocation.params.get("top_k"), 1, 1, 1000)


def top_labels(probabilities: list[list[float]], labels: dict, top_k: int) -> list[list[dict]]:
    """Per text, the ``top_k`` labels by probability."""
    out = []
    for row in probabilities:
        order = sorted(range(len(row)), key=lambda i: -row[i])[: min(top_k, len(row))]
        out.append([{"label": labels.get(i, str(i)), "score": row[i]} for i in order])
    return out


class TextClassificationHandler:
    max_concurrency = 1

    def __init__(self, spec: ModelSpec, num_threads: int = 0):
        self.tokenizer, self.model = _load(spec, "AutoModelForSequenceClassification", num_threads)
        self.labels = self.model.config.id2label
        self.max_length = min(int(self.tokenizer.model_max_length or 512), 512)

    def probabilities(self, texts: list[str]) -> list[list[float]]:
        import torch

        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        with torch.inference_mode():
            return self.model(**batch).logits.softmax(-1).tolist()  # [B, num_labels]

    def classify(self, texts: list[str], top_k: int) -> list[list[dict]]:
        return top_labels(self.probabilities(texts), self.labels, top_k)

    def invoke(self, invocation: InvokeRequest, body: bytes) -> tuple[InvokeReply, bytes]:
        texts, top_k = classification_request(invocation, body)
        return json_reply({"predictions": self.classify(texts, top_k)})

    def close(self) -> None:
        self.model = None
