"""A ``tokenizers.Tokenizer`` and its special tokens, built as transformers 5.24 builds them.

``build_tokenizer(files)`` follows ``TokenizersBackend.__init__`` (and ``GPT2Tokenizer``'s, which
rebuilds the pipeline from tokenizer.json's vocabulary and merges) step by step, down to its
quirks: every added token of the config is added again, special tokens missing from the
vocabulary are added as plain added tokens, a missing post-processor becomes an empty template.
Padding and truncation are turned off, as transformers' ``encode`` turns them off.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers, processors
from tokenizers.models import BPE

from .tokenizer_files import GPT2, NAMED_SPECIAL_TOKENS, TokenizerFiles, UnsupportedTokenizer, check_regex_patch

_GPT2_DEFAULTS = {"unk_token": "<|endoftext|>", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
                  "pad_token": None}


@dataclass(frozen=True)
class TokenizerParts:
    backend: Tokenizer
    special_tokens: dict[str, str | AddedToken | None]  # bos_token... mask_token, then the model's own
    extra_special_tokens: list[str | AddedToken]
    settings: dict[str, Any]  # the config's other values: model_max_length, chat_template...


def build_tokenizer(files: TokenizerFiles) -> TokenizerParts:
    """What transformers builds from ``files``, step by step as TokenizersBackend.__init__ does."""
    kwargs = dict(files.init_kwargs)
    if files.tokenizer_class == GPT2:
        backend, saved_added = _gpt2_backend(files.tokenizer_json, kwargs.get("add_prefix_space", False))
    else:
        backend = Tokenizer.from_file(str(files.tokenizer_json))
        saved_added = backend.get_added_tokens_decoder()
    added = files.added_tokens if files.added_tokens is not None else saved_added
    by_content = {str(token): token for token in added.values()}
    for name in NAMED_SPECIAL_TOKENS:  # the config's special tokens, with their added-token flags
        if kwargs.get(name) is not None and by_content:
            kwargs[name] = by_content.get(str(kwargs[name]), kwargs[name])
    if files.tokenizer_class == GPT2:
        kwargs = {**_GPT2_DEFAULTS, **kwargs}
    padding = backend.padding
    if padding is not None:
        kwargs.setdefault("pad_token", padding["pad_token"])
    backend.no_padding()  # transformers' encode() turns both off
    backend.no_truncation()
    special, extra = _special_tokens(kwargs)
    backend.encode_special_tokens = bool(kwargs.get("split_special_tokens", False))
    _add_missing_tokens(backend, [added[i] for i in sorted(added)], special, extra)
    check_regex_patch(files, backend.get_vocab_size(), backend.pre_tokenizer is not None)
    if backend.post_processor is None:
        backend.post_processor = processors.TemplateProcessing(single="$A:0", pair="$A:0 $B:1", special_tokens=[])
    return TokenizerParts(backend, special, extra, kwargs)


def _gpt2_backend(tokenizer_json: Path, add_prefix_space: bool) -> tuple[Tokenizer, dict[int, AddedToken]]:
    """GPT2Tokenizer's pipeline: tokenizer.json's vocabulary, merges and post-processor only."""
    saved = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    model = saved.get("model", {})
    if model.get("type") != "BPE":
        raise UnsupportedTokenizer(f"GPT2Tokenizer over a {model.get('type')} model")
    vocab = model.get("vocab")
    if isinstance(vocab, list):
        vocab = {token[0] if isinstance(token, list) else token: i for i, token in enumerate(vocab)}
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model.get("merges", [])]
    minimal = {**saved, "model": {**model, "vocab": {}, "merges": []}, "added_tokens": []}
    file_settings = Tokenizer.from_str(json.dumps(minimal))
    backend = Tokenizer(BPE(vocab=vocab, merges=merges, dropout=None, continuing_subword_prefix="",
                            end_of_word_suffix="", fuse_unk=False))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    backend.decoder = decoders.ByteLevel()
    if file_settings.padding is not None:
        backend.enable_padding(**file_settings.padding)
    if file_settings.post_processor is not None:
        backend.post_processor = file_settings.post_processor
    saved_added = {t["id"]: AddedToken(**{k: v for k, v in t.items() if k != "id"})
                   for t in saved.get("added_tokens", [])}
    return backend, saved_added


def _special_tokens(kwargs: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """(named special tokens, then the model's own, in order; the extra special tokens), as
    PreTrainedTokenizerBase.__init__ sorts its keyword arguments."""
    kwargs = dict(kwargs)
    if "additional_special_tokens" in kwargs and "extra_special_tokens" not in kwargs:
        kwargs["extra_special_tokens"] = kwargs.pop("additional_special_tokens")
    explicit = kwargs.pop("model_specific_special_tokens", None) or {}
    special: dict[str, Any] = dict.fromkeys(NAMED_SPECIAL_TOKENS)
    extra: list[Any] = []
    auto: dict[str, Any] = {}
    for key in list(kwargs):
        value = kwargs[key]
        if key in special:
            if value is not None:
                special[key] = _token(key, value)
        elif key == "extra_special_tokens" and isinstance(value, dict):
            special.update({name: _token(name, token) for name, token in value.items()})
        elif key == "extra_special_tokens" and value is not None:
            if not isinstance(value, (list, tuple)):
                raise UnsupportedTokenizer(f"extra_special_tokens is a {type(value).__name__}")
            extra = [_token(key, token) for token in value]
        elif key.endswith("_token") and isinstance(value, (str, AddedToken)):
            auto[key] = value
    special.update({name: _token(name, token) for name, token in {**auto, **explicit}.items()})
    return special, extra


def _token(name: str, value: Any) -> str | AddedToken:
    if isinstance(value, (str, AddedToken)):
        return value
    raise UnsupportedTokenizer(f"{name} is a {type(value).__name__}, not a token")


def _add_missing_tokens(backend: Tokenizer, added: list[AddedToken], special: dict[str, Any],
                        extra: list[Any]) -> None:
    """The config's added tokens (all of them: transformers' check for those already there never
    matches), then the special tokens the backend does not have, as plain added tokens."""
    tokens = [AddedToken(**token.__getstate__()) for token in added]
    known = [t.content for _, t in sorted(backend.get_added_tokens_decoder().items())] + [str(t) for t in tokens]
    for token in [*special.values(), *extra]:
        if token is not None and str(token) not in known and token not in tokens:
            tokens.append(token)
    named = [str(token) for token in special.values() if token]
    for i, token in enumerate(tokens):
        if isinstance(token, str):
            tokens[i] = AddedToken(token, special=True)
        elif not token.special and str(token) in named:
            token.special = True
    if tokens:
        backend.add_tokens(tokens)
