"""What a model folder says about its tokenizer, read the way transformers' ``AutoTokenizer`` reads it.

``read_tokenizer_files(folder)`` returns what a ``FastTokenizer`` is built from, or raises
``UnsupportedTokenizer`` naming what only transformers reproduces: no tokenizer.json, custom code,
a tokenizer class that rebuilds the pipeline its own way (Llama's sentencepiece, Qwen2, Gemma...),
an option not handled here. It follows transformers 5.24: ``AutoTokenizer.from_pretrained`` for the
class, ``PreTrainedTokenizerBase._from_pretrained`` for the settings. The tables below are checked
against the installed transformers by tests/unit/models/test_tokenizer_files.py, so an upgrade that
changes them fails there first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from tokenizers import AddedToken

AS_SAVED = "TokenizersBackend"  # tokenizer.json used as it is
GPT2 = "GPT2Tokenizer"  # a byte-level BPE rebuilt from tokenizer.json's vocabulary and merges

NAMED_SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
_GENERIC_CLASSES = frozenset({"TokenizersBackend", "PreTrainedTokenizer", "BloomTokenizer"})  # without "Fast"

# AutoTokenizer's class for a model type (TOKENIZER_MAPPING_NAMES; None: none registered). Only the
# types listed here are served without transformers when the class depends on the model type.
MODEL_TYPE_CLASSES: dict[str, str | None] = {
    "llama": None, "falcon": None, "smollm3": None,
    "gpt2": "GPT2Tokenizer", "opt": "GPT2Tokenizer", "phi": "GPT2Tokenizer", "starcoder2": "GPT2Tokenizer",
    "codegen": "GPT2Tokenizer", "gptj": "GPT2Tokenizer", "gpt_neox": "GPTNeoXTokenizer",
    "olmo": "GPTNeoXTokenizer", "granite": "TokenizersBackend", "olmo2": "TokenizersBackend",
    "stablelm": "TokenizersBackend", "gpt_bigcode": "TokenizersBackend", "qwen3": "Qwen2Tokenizer",
    "gemma": "GemmaTokenizer", "gemma2": "GemmaTokenizer", "cohere": "CohereTokenizer",
}
# Model types whose tokenizer_class AutoTokenizer ignores for a class of its own
# (MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS with a registered class that is not generic).
HUB_CLASS_REPLACED = frozenset({"hyperclovax_vision_v2", "qwen2", "qwen3_5", "qwen3_5_moe", "qwen3_5_moe_text",
                                "qwen4_exp", "siglip2"})
# Paths AutoTokenizer loads with TokenizersBackend whatever they declare (MODEL_IDS_TO_TOKENIZERS_BACKEND).
TOKENIZERS_BACKEND_IDS = (
    "deepseek-ai/deepseek-r1-distill-llama-*", "deepseek-ai/deepseek-coder-*", "allenai/dolma2-tokenizer",
    "google/umt5-small", "naver-clova-ix/donut-*", "salesforce/blip2-opt-*", "salesforce/blip2-flan-t5-*",
    "salesforce/instructblip-flan-t5-*", "stepfun-ai/step-3.7-*",
)
# tokenizer_config.json keys that change what transformers builds in ways not reproduced here.
_UNHANDLED_KEYS = ("auto_map", "fast_tokenizer_files", "gguf_file", "post_processor", "tokenizer_padding",
                   "tokenizer_truncation", "tokenizer_object", "model_specific_special_tokens", "fix_mistral_regex")
_MISTRAL_TYPES = ("mistral", "mistral3", "voxtral", "ministral", "pixtral")
_PATCHED_REGEX_MIN_VOCAB = 100_000  # transformers may patch the pre-tokenizer of larger (Mistral) vocabularies


class UnsupportedTokenizer(Exception):
    """Only transformers reproduces this tokenizer; the message says why."""


@dataclass(frozen=True)
class TokenizerFiles:
    tokenizer_json: Path
    tokenizer_class: str  # AS_SAVED or GPT2: the transformers class this reproduces
    init_kwargs: dict[str, Any]  # tokenizer_config.json (+ special_tokens_map.json) as transformers passes it on
    added_tokens: dict[int, AddedToken] | None  # tokenizer_config's added_tokens_decoder; None: tokenizer.json's
    model_type: str | None
    transformers_version: str | None  # of config.json


def read_tokenizer_files(path: str | Path) -> TokenizerFiles:
    folder = Path(path)
    if not folder.is_dir():
        raise UnsupportedTokenizer(f"{folder} is not a folder")
    tokenizer_json = folder / "tokenizer.json"
    if not tokenizer_json.is_file():
        raise UnsupportedTokenizer("the folder has no tokenizer.json")
    config = _read_json(folder / "tokenizer_config.json")
    model_config = _read_json(folder / "config.json")
    unhandled = [key for key in _UNHANDLED_KEYS if key in config]
    if unhandled:
        raise UnsupportedTokenizer(f"tokenizer_config.json sets {', '.join(unhandled)}")
    if (folder / "tekken.json").exists():
        raise UnsupportedTokenizer("the folder has a tekken.json (Mistral's own format)")
    if model_config and not isinstance(model_config.get("model_type"), str):
        raise UnsupportedTokenizer("config.json names no model_type")
    if "model_name" in model_config:
        raise UnsupportedTokenizer("config.json sets model_name")
    kwargs, added = _init_kwargs(folder, config)
    return TokenizerFiles(tokenizer_json, tokenizer_class(str(path), tokenizer_json, config, model_config),
                          kwargs, added, model_config.get("model_type"), model_config.get("transformers_version"))


def tokenizer_class(path: str, tokenizer_json: Path, config: dict, model_config: dict) -> str:
    """AS_SAVED or GPT2: the class AutoTokenizer.from_pretrained(path) builds (no custom code)."""
    if any(fnmatch(path.lower(), pattern) for pattern in TOKENIZERS_BACKEND_IDS):
        return AS_SAVED
    model_type = model_config.get("model_type")
    known = model_type is None or model_type in MODEL_TYPE_CLASSES
    registered = MODEL_TYPE_CLASSES.get(model_type)
    declared = config.get("tokenizer_class") or model_config.get("tokenizer_class")
    if declared is None:
        if not known or model_type is None:
            raise UnsupportedTokenizer(f"no tokenizer_class, and model type {model_type!r} is not one known here")
        chosen = registered or AS_SAVED
    elif declared.removesuffix("Fast") in _GENERIC_CLASSES:
        if model_type in HUB_CLASS_REPLACED:
            raise UnsupportedTokenizer(f"transformers uses its own tokenizer class for {model_type} models")
        return AS_SAVED
    elif not known:
        raise UnsupportedTokenizer(f"{declared} with model type {model_type!r}, not one known here")
    elif declared.removesuffix("Fast") == "LlamaTokenizer":
        if '"ByteLevel"' not in tokenizer_json.read_text(encoding="utf-8"):
            raise UnsupportedTokenizer("LlamaTokenizer rebuilds a sentencepiece pipeline in transformers")
        return AS_SAVED  # a Llama 3 style byte-level tokenizer: AutoTokenizer keeps tokenizer.json
    elif declared.removesuffix("Fast") == "GPT2Tokenizer":
        generic = registered is not None and registered.removesuffix("Fast") in _GENERIC_CLASSES
        chosen = AS_SAVED if generic else GPT2
    else:
        chosen = declared
    if chosen not in (AS_SAVED, GPT2):
        raise UnsupportedTokenizer(f"{chosen} rebuilds its pipeline in transformers")
    return chosen


def check_regex_patch(files: TokenizerFiles, vocab_size: int, has_pre_tokenizer: bool) -> None:
    """transformers patches (or warns about) the pre-tokenizer of large Mistral-style vocabularies
    saved before transformers 5: those are left to it."""
    if vocab_size <= _PATCHED_REGEX_MIN_VOCAB or not has_pre_tokenizer or files.model_type is None:
        return
    version = files.transformers_version
    if version and int(version.split(".")[0]) >= 5:
        return
    if files.model_type in _MISTRAL_TYPES:
        raise UnsupportedTokenizer("a Mistral tokenizer saved before transformers 5 (its regex may need a patch)")


def _init_kwargs(folder: Path, config: dict) -> tuple[dict[str, Any], dict[int, AddedToken] | None]:
    """tokenizer_config.json as PreTrainedTokenizerBase._from_pretrained hands it to the class."""
    kwargs = {k: v for k, v in config.items() if k not in ("tokenizer_class", "init_inputs")}
    kwargs.pop("add_bos_token", None)  # ignored when there is a tokenizer.json
    kwargs.pop("add_eos_token", None)
    templates = _chat_templates(folder)
    if templates:
        kwargs["chat_template"] = templates["default"] if list(templates) == ["default"] else templates
    if "additional_special_tokens" in kwargs and not kwargs.get("extra_special_tokens"):
        kwargs["extra_special_tokens"] = kwargs.pop("additional_special_tokens")
    model_specific = {k: kwargs.pop(k) for k in list(kwargs)
                      if k not in NAMED_SPECIAL_TOKENS and k.endswith("_token") and isinstance(kwargs[k], str)}
    if isinstance(kwargs.get("extra_special_tokens"), dict):
        model_specific.update(kwargs.pop("extra_special_tokens"))
    if model_specific:
        kwargs["model_specific_special_tokens"] = model_specific
    added: dict[int, AddedToken] | None = None
    if "added_tokens_decoder" in kwargs:
        added = {int(i): _added_token(t) for i, t in kwargs.pop("added_tokens_decoder").items()}
    else:
        _merge_special_tokens_map(kwargs, _read_json(folder / "special_tokens_map.json"))
        if (folder / "added_tokens.json").exists():
            raise UnsupportedTokenizer("the folder has an added_tokens.json (a slow tokenizer's)")
    return _as_added_tokens(kwargs), added


def _merge_special_tokens_map(kwargs: dict, special_map: dict) -> None:
    """The legacy special_tokens_map.json, read when tokenizer_config.json has no added_tokens_decoder."""
    for key, value in special_map.items():
        if isinstance(value, dict) and key != "extra_special_tokens":
            value = AddedToken(**{k: v for k, v in value.items() if k != "special"}, special=True)
        elif key == "extra_special_tokens" and isinstance(value, list):
            merged = list(kwargs.get("extra_special_tokens") or [])
            for token in value:
                token = AddedToken(**token, special=True) if isinstance(token, dict) else token
                if token not in merged:
                    merged.append(token)
            value = merged
        kwargs[key] = value
    if isinstance(kwargs.get("extra_special_tokens"), dict):
        kwargs.setdefault("model_specific_special_tokens", {}).update(kwargs.pop("extra_special_tokens"))


def _chat_templates(folder: Path) -> dict[str, str]:
    """chat_template.jinja ("default") and additional_chat_templates/*.jinja: they win over the config's."""
    templates = {}
    if (folder / "chat_template.jinja").is_file():
        templates["default"] = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    extra = folder / "additional_chat_templates"
    if extra.is_dir():
        for file in extra.glob("*.jinja"):
            templates[file.name.removesuffix(".jinja")] = file.read_text(encoding="utf-8")
    return templates


def _added_token(value: Any) -> AddedToken:
    if isinstance(value, dict):
        return AddedToken(**value)
    raise UnsupportedTokenizer(f"an added_tokens_decoder entry is a {type(value).__name__}")


def _as_added_tokens(value: Any) -> Any:
    """``{"__type": "AddedToken", ...}`` objects, at any depth, as AddedToken (convert_added_tokens)."""
    if isinstance(value, dict) and value.get("__type") == "AddedToken":
        return AddedToken(**{k: v for k, v in value.items() if k != "__type"})
    if isinstance(value, (list, tuple)):
        return [_as_added_tokens(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_added_tokens(v) for k, v in value.items()}
    return value


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UnsupportedTokenizer(f"{path.name} is unreadable: {exc}") from None
    if not isinstance(data, dict):
        raise UnsupportedTokenizer(f"{path.name} is not a JSON object")
    return data
