"""A model's tokenizer from its tokenizer.json, without transformers or torch.

``FastTokenizer`` gives the same ids, text and chat prompts as ``AutoTokenizer.from_pretrained``
(transformers 5.24) for the folders ``tokenizer_files`` accepts (built by ``tokenizer_build``),
through the part of the tokenizer interface the server uses. Importing transformers costs a front-end process ~5 s and
~350 MB (it pulls in torch); the ``tokenizers`` library costs 0.1 s and ~20 MB. ``load_tokenizer``
falls back to transformers, with one log line saying why, for every folder it cannot reproduce.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from ..errors import ModelLoadError
from .chat_template import render_chat
from .tokenizer_build import TokenizerParts, build_tokenizer
from .tokenizer_files import NAMED_SPECIAL_TOKENS, UnsupportedTokenizer, read_tokenizer_files

log = logging.getLogger(__name__)

VERY_LARGE_INTEGER = int(1e30)  # transformers' model_max_length when a tokenizer sets none
_TOKENIZED_CHAT_OPTIONS = ("padding", "truncation", "max_length", "return_tensors", "return_assistant_tokens_mask",
                           "tokenizer_kwargs", "sanitize_control_tokens", "continue_final_message")


def load_tokenizer(path: str | Path, trust_remote_code: bool = False) -> Any:
    """A ``FastTokenizer`` where it reproduces transformers exactly, else transformers' AutoTokenizer."""
    try:
        return FastTokenizer.from_folder(path)
    except UnsupportedTokenizer as exc:
        log.info("tokenizer of %s: loaded with transformers, since %s", path, exc)
    except Exception as exc:  # noqa: BLE001 - whatever is misread here, transformers still reads it
        log.warning("tokenizer of %s: loaded with transformers, since reading it here failed: %s: %s",
                    path, type(exc).__name__, exc)
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path), trust_remote_code=trust_remote_code, local_files_only=True)
    except Exception as exc:
        raise ModelLoadError(f"cannot load the tokenizer from {path}: {type(exc).__name__}: {exc}") from exc


class FastTokenizer:
    """The tokenizer interface of transformers' TokenizersBackend, over a ``tokenizers.Tokenizer``."""

    is_fast = True

    def __init__(self, parts: TokenizerParts, name_or_path: str = ""):
        """Use ``from_folder``."""
        self._backend = parts.backend  # thread-safe: encode and decode never change it
        self._special = parts.special_tokens
        self._extra = parts.extra_special_tokens
        self.name_or_path = name_or_path
        settings = dict(parts.settings)
        max_len = settings.pop("model_max_length", settings.pop("max_len", None))
        self.model_max_length = max_len if max_len is not None else VERY_LARGE_INTEGER
        self.clean_up_tokenization_spaces = settings.get("clean_up_tokenization_spaces", False)
        self._clean_up_bpe = settings.get("clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output",
                                          False)
        template = settings.get("chat_template")
        if isinstance(template, (list, tuple)):
            template = {t["name"]: t["template"] for t in template}
        self.chat_template: str | dict[str, str] | None = template

    @classmethod
    def from_folder(cls, path: str | Path) -> FastTokenizer:
        """Raises UnsupportedTokenizer for a folder only transformers reproduces."""
        return cls(build_tokenizer(read_tokenizer_files(path)), str(path))

    # --- special tokens ------------------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        """``eos_token``, ``eos_token_id``, ``pad_token``... and the model's own (``image_token``)."""
        key = name.removesuffix("_id")
        special = self.__dict__.get("_special", {})
        if key not in special and key not in NAMED_SPECIAL_TOKENS:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        token = special.get(key)
        if token is None:
            return None
        return self.convert_tokens_to_ids(str(token)) if name != key else str(token)

    @property
    def special_tokens_map(self) -> dict[str, str]:
        return {name: str(token) for name, token in self._special.items() if token is not None}

    @property
    def extra_special_tokens(self) -> list[str]:
        return [str(token) for token in self._extra]

    @property
    def all_special_tokens(self) -> list[str]:
        tokens = [str(t) for t in self._special.values() if t is not None] + self.extra_special_tokens
        return list(dict.fromkeys(tokens))

    @property
    def all_special_ids(self) -> list[int]:
        return self.convert_tokens_to_ids(self.all_special_tokens)

    # --- vocabulary ----------------------------------------------------------------------------

    @property
    def backend_tokenizer(self) -> Tokenizer:
        return self._backend

    @property
    def vocab_size(self) -> int:
        """Without the added tokens; ``len()`` counts them."""
        return self._backend.get_vocab_size(with_added_tokens=False)

    def __len__(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    def get_vocab(self) -> dict[str, int]:
        return self._backend.get_vocab(with_added_tokens=True)

    def convert_tokens_to_ids(self, tokens: str | list[str]) -> int | list[int] | None:
        if isinstance(tokens, str):
            index = self._backend.token_to_id(tokens)
            unk = self._special.get("unk_token")
            return index if index is not None or unk is None else self._backend.token_to_id(str(unk))
        return [self.convert_tokens_to_ids(token) for token in tokens]

    def convert_ids_to_tokens(self, ids: int | list[int],
                              skip_special_tokens: bool = False) -> str | list[str | None] | None:
        if isinstance(ids, int):
            return self._backend.id_to_token(ids)
        skip = set(self.all_special_ids) if skip_special_tokens else set()
        return [self._backend.id_to_token(int(i)) for i in ids if int(i) not in skip]

    # --- text <-> ids --------------------------------------------------------------------------

    def encode(self, text: str, text_pair: str | None = None, add_special_tokens: bool = True) -> list[int]:
        if not isinstance(text, str) or not (text_pair is None or isinstance(text_pair, str)):
            raise ValueError("text input must be of type `str` here")
        return self._backend.encode(text, text_pair or None, add_special_tokens=add_special_tokens).ids

    def decode(self, token_ids: Any, skip_special_tokens: bool = False,
               clean_up_tokenization_spaces: bool | None = None) -> str | list[str]:
        """One sequence (ids, or one id) or a batch (a list of id lists)."""
        ids = token_ids.tolist() if hasattr(token_ids, "tolist") else token_ids
        if isinstance(ids, dict):
            ids = ids["input_ids"]
        if isinstance(ids, (list, tuple)) and ids and isinstance(ids[0], (list, tuple)):
            return [self.decode(seq, skip_special_tokens, clean_up_tokenization_spaces) for seq in ids]
        text = self._backend.decode([ids] if isinstance(ids, int) else list(ids),
                                    skip_special_tokens=skip_special_tokens)
        clean = clean_up_tokenization_spaces
        if clean is None:
            clean = self.clean_up_tokenization_spaces
        if clean and (type(self._backend.model).__name__ != "BPE" or self._clean_up_bpe):
            text = _clean_up_tokenization(text)
        return text

    def apply_chat_template(self, conversation: Any, tools: list[dict] | None = None,
                            documents: list[dict] | None = None, chat_template: str | None = None,
                            add_generation_prompt: bool = False, tokenize: bool = True, return_dict: bool = True,
                            **kwargs: Any) -> str | list[int] | dict[str, list[int]]:
        """The chat as text (``tokenize=False``), ids, or ``{"input_ids", "attention_mask"}``; one conversation."""
        unsupported = [name for name in _TOKENIZED_CHAT_OPTIONS if kwargs.get(name)]
        if unsupported:
            raise NotImplementedError(f"apply_chat_template({', '.join(unsupported)}=...) needs transformers")
        if isinstance(conversation, (list, tuple)) and not conversation:
            raise ValueError("Cannot apply chat template to an empty conversation. Provide at least one message.")
        if isinstance(conversation, (list, tuple)) and isinstance(conversation[0], (list, tuple)):
            raise NotImplementedError("apply_chat_template renders one conversation here, not a batch")
        for name in _TOKENIZED_CHAT_OPTIONS:
            kwargs.pop(name, None)
        text = render_chat(self.get_chat_template(chat_template, tools), conversation, tools, documents,
                           add_generation_prompt, **{**self.special_tokens_map, **kwargs})
        if not tokenize:
            return text
        ids = self.encode(text, add_special_tokens=False)
        return {"input_ids": ids, "attention_mask": [1] * len(ids)} if return_dict else ids

    def get_chat_template(self, chat_template: str | None = None, tools: list[dict] | None = None) -> str:
        templates = self.chat_template
        if isinstance(templates, dict):
            if chat_template is not None and chat_template in templates:
                return templates[chat_template]
            if chat_template is None:
                if tools is not None and "tool_use" in templates:
                    return templates["tool_use"]
                if "default" in templates:
                    return templates["default"]
                raise ValueError("This model has multiple chat templates with no default specified! Available "
                                 f"template names are {sorted(templates)}.")
            return chat_template
        if chat_template is not None:
            return chat_template
        if templates is None:
            raise ValueError("Cannot use chat template functions because tokenizer.chat_template is not set and no "
                             "template argument was passed!")
        return templates

    def __repr__(self) -> str:
        return f"FastTokenizer(name_or_path={self.name_or_path!r}, vocab_size={self.vocab_size}, len={len(self)})"


def _clean_up_tokenization(text: str) -> str:
    return (text.replace(" .", ".").replace(" ?", "?").replace(" !", "!").replace(" ,", ",").replace(" ' ", "'")
            .replace(" n't", "n't").replace(" 'm", "'m").replace(" 's", "'s").replace(" 've", "'ve")
            .replace(" 're", "'re"))
