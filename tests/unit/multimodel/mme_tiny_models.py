"""Tiny model folders for multi-model tests: an ONNX image classifier and BERT text models.

Each builds in well under a second and loads through the real handlers.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

TINY_LABELS = ["red", "green", "blue", "gray"]
_WORDS = ["hello", "world", "good", "bad", "movie", "great", "awful", "the", "a", "is"]


def build_tiny_onnx(dest: Path) -> Path:
    """[N,3,224,224] -> mean colour per channel -> 4 logits (red, green, blue, gray)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = np.array(
        [[4.0, -2.0, -2.0, 0.0], [-2.0, 4.0, -2.0, 0.0], [-2.0, -2.0, 4.0, 0.0]], dtype=np.float32
    )
    bias = np.array([0.0, 0.0, 0.0, 0.5], dtype=np.float32)
    nodes = [
        helper.make_node("GlobalAveragePool", ["pixels"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"], axis=1),
        helper.make_node("MatMul", ["flat", "weight"], ["scores"]),
        helper.make_node("Add", ["scores", "bias"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_colour_classifier",
        [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["N", 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4])],
        initializer=[numpy_helper.from_array(weight, "weight"), numpy_helper.from_array(bias, "bias")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    dest.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(dest / "model.onnx"))
    (dest / "labels.txt").write_text("\n".join(TINY_LABELS) + "\n")
    return dest


def _tokenizer(dest: Path):
    from transformers import BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *_WORDS]
    (dest / "vocab.txt").write_text("\n".join(vocab) + "\n")
    # transformers 5 ignores vocab_file= here (every word became [UNK]); give the vocabulary itself
    return BertTokenizerFast(vocab={word: i for i, word in enumerate(vocab)}, model_max_length=64)


def _bert_config(**extra):
    from transformers import BertConfig

    return BertConfig(
        vocab_size=5 + len(_WORDS), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=64, **extra,
    )


def build_tiny_embedder(dest: Path) -> Path:
    """A 1-layer BERT laid out as a sentence-transformers folder (mean pooling + normalize)."""
    import torch
    from transformers import BertModel

    dest.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer(dest)
    torch.manual_seed(0)
    BertModel(_bert_config()).save_pretrained(dest, safe_serialization=True)
    tokenizer.save_pretrained(dest)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (dest / "modules.json").write_text(json.dumps(modules))
    (dest / "1_Pooling").mkdir(exist_ok=True)
    (dest / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    return dest


def build_tiny_classifier(dest: Path) -> Path:
    """A 1-layer BertForSequenceClassification with labels NEGATIVE/POSITIVE."""
    import torch
    from transformers import BertForSequenceClassification

    dest.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer(dest)
    torch.manual_seed(0)
    config = _bert_config(num_labels=2, id2label={0: "NEGATIVE", 1: "POSITIVE"}, label2id={"NEGATIVE": 0, "POSITIVE": 1})
    BertForSequenceClassification(config).save_pretrained(dest, safe_serialization=True)
    tokenizer.save_pretrained(dest)
    return dest


def png_bytes(colour: tuple[int, int, int], size: tuple[int, int] = (320, 240)) -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


def jpeg_bytes(colour: tuple[int, int, int], size: tuple[int, int] = (300, 300)) -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="JPEG")
    return buffer.getvalue()
