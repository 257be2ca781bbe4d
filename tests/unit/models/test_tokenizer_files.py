"""Which folders FastTokenizer serves, and the class it reproduces: checked against transformers itself.

The module's tables copy transformers' (a model type's tokenizer class, the model types whose
declared class it overrides, the ids it always loads as saved): an upgrade that changes them
fails here. Then AutoTokenizer's choice over a grid of declared classes and model types.
"""

from __future__ import annotations

import json

import pytest
from fixtures.tokenizer_folders import byte_level, llama_like, write_folder
from transformers import AutoTokenizer
from transformers.models.auto import tokenization_auto

from llm_byoc.models.fast_tokenizer import FastTokenizer
from llm_byoc.models.tokenizer_files import (
    AS_SAVED,
    GPT2,
    HUB_CLASS_REPLACED,
    MODEL_TYPE_CLASSES,
    TOKENIZERS_BACKEND_IDS,
    TokenizerFiles,
    UnsupportedTokenizer,
    check_regex_patch,
    read_tokenizer_files,
)

_GENERIC = {"TokenizersBackend", "PythonBackend", "PreTrainedTokenizerFast", "MistralCommonBackend"}


def test_the_model_type_table_is_transformers_own():
    for model_type, cls in MODEL_TYPE_CLASSES.items():
        assert tokenization_auto.TOKENIZER_MAPPING_NAMES.get(model_type) == cls, model_type
        assert model_type not in tokenization_auto.MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS


def test_the_overridden_model_types_are_transformers_own():
    names = tokenization_auto.TOKENIZER_MAPPING_NAMES
    replaced = {t for t in tokenization_auto.MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS
                if (names.get(t) or "TokenizersBackend").removesuffix("Fast") not in _GENERIC}
    assert replaced == HUB_CLASS_REPLACED


def test_the_always_as_saved_ids_are_transformers_own():
    assert tuple(tokenization_auto.MODEL_IDS_TO_TOKENIZERS_BACKEND) == TOKENIZERS_BACKEND_IDS


DECLARED = [None, "TokenizersBackend", "PreTrainedTokenizerFast", "GPT2Tokenizer", "GPT2TokenizerFast",
            "LlamaTokenizerFast", "Qwen2Tokenizer", "BertTokenizer"]
MODEL_TYPES = ["llama", "gpt2", "opt", "granite", "qwen2", "qwen3", "gemma", "phi3", "mistral", "bert", None]


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_the_class_is_the_one_auto_tokenizer_builds(tmp_path, model_type):
    for declared in DECLARED:
        for name, tokenizer in (("byte-level", byte_level()), ("metaspace", llama_like())):
            folder = tmp_path / f"{declared}-{name}"
            config = {"eos_token": "<|im_end|>" if name == "byte-level" else "</s>"}
            if declared:
                config["tokenizer_class"] = declared
            write_folder(folder, tokenizer, config, model_type=model_type)
            try:
                chosen = read_tokenizer_files(folder).tokenizer_class
            except UnsupportedTokenizer:
                continue  # left to transformers
            built = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
            assert type(built).__name__ == chosen, (declared, model_type, name)
            built.encode("x")  # turns padding and truncation off, as FastTokenizer's build does
            fast = FastTokenizer.from_folder(folder)
            assert fast.backend_tokenizer.to_str() == built.backend_tokenizer.to_str()
            assert fast.all_special_ids == built.all_special_ids


def test_what_a_fast_tokenizer_is_made_of(tiny_llama_dir):
    files = read_tokenizer_files(tiny_llama_dir)
    assert files.tokenizer_class == AS_SAVED and files.model_type == "llama"
    assert files.init_kwargs["eos_token"] == "</s>" and files.added_tokens is None  # a v5 config: tokenizer.json's
    assert files.init_kwargs["chat_template"].startswith("{{ bos_token }}")  # from chat_template.jinja


@pytest.mark.parametrize(("change", "reason"), [
    (lambda f: (f / "tokenizer.json").unlink(), "no tokenizer.json"),
    (lambda f: _config(f, auto_map={"AutoTokenizer": ["x.Tok", None]}), "auto_map"),
    (lambda f: _config(f, tokenizer_class="Qwen2Tokenizer"), "Qwen2Tokenizer rebuilds"),
    (lambda f: _config(f, tokenizer_class="PreTrainedTokenizerFast") or _model(f, "qwen2"), "qwen2"),
    (lambda f: _config(f, tokenizer_class="GPT2Tokenizer") or _model(f, "exotic"), "not one known here"),
    (lambda f: _config(f, tokenizer_class=None) or _model(f, "exotic"), "no tokenizer_class"),
    (lambda f: (f / "tekken.json").write_text("{}"), "tekken.json"),
    (lambda f: (f / "tokenizer_config.json").write_text("{not json"), "tokenizer_config.json is unreadable"),
    (lambda f: _config(f, fast_tokenizer_files=["tokenizer.x.json"]), "fast_tokenizer_files"),
    (lambda f: _config(f, added_tokens_decoder={"0": "<s>"}), "added_tokens_decoder entry is a str"),
])
def test_folders_left_to_transformers_say_why(tiny_llama_dir, tmp_path, change, reason):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(tiny_llama_dir, folder)
    change(folder)
    with pytest.raises(UnsupportedTokenizer, match=reason):
        read_tokenizer_files(folder)


def test_an_old_mistral_vocabulary_is_left_to_transformers(tmp_path):
    def files(model_type, version):
        return TokenizerFiles(tmp_path, AS_SAVED, {}, None, model_type, version)

    with pytest.raises(UnsupportedTokenizer, match="Mistral"):
        check_regex_patch(files("mistral", "4.46.0"), vocab_size=131_072, has_pre_tokenizer=True)
    check_regex_patch(files("mistral", "5.1.0"), vocab_size=131_072, has_pre_tokenizer=True)
    check_regex_patch(files("llama", "4.46.0"), vocab_size=131_072, has_pre_tokenizer=True)
    check_regex_patch(files("mistral", None), vocab_size=32_000, has_pre_tokenizer=True)
    assert GPT2 != AS_SAVED


def _config(folder, **changes):
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text()) | changes
    path.write_text(json.dumps({k: v for k, v in config.items() if v is not None}))


def _model(folder, model_type):
    path = folder / "config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"model_type": model_type}))
