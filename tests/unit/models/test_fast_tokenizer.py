"""FastTokenizer against transformers' AutoTokenizer: the same ids, text, special tokens and chat prompts.

Every folder kind is loaded by both and compared: the backend pipeline (tokenizer.json as
transformers leaves it), encode/decode of many strings, ids and tokens, special tokens,
chat prompts with and without a generation prompt and with tools. Then the fallback to
transformers, and that loading one imports neither torch nor transformers.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap

import pytest
from fixtures.tokenizer_folders import (
    LLAMA_TEMPLATE,
    TOOLS_TEMPLATE,
    added_token,
    byte_level,
    llama_like,
    wordpiece,
    write_folder,
)
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import Tokenizer
from transformers import AutoTokenizer

from llm_byoc.models.fast_tokenizer import FastTokenizer, load_tokenizer
from llm_byoc.models.loader import load_tokenizer as loader_load_tokenizer
from llm_byoc.models.tokenizer_files import read_tokenizer_files

TEXTS = [
    "", " ", "Hello world", " Hello world", "Hello  world  ", "\n\nnew\nlines\r\n", "\ttab\t\tbed",
    "The quick brown fox jumps over the lazy dog. Don't panic, it's fine!",
    "Café naïve Zürich — 東京 서울 Москва", "emoji 😀🚀👩‍👩‍👧 and flags 🇫🇷", "e\u0301 combining, \u00a0nbsp, \u200bzw",
    "numbers 1234567890 3.14159 -42 1e10", "code: def f(x):\n    return x ** 2  # square",
    '{"name": "get_weather", "arguments": {"city": "Paris"}}', "<<>> </ > <| |> [] [[ ]] ## ##x",
    "x" * 300, "ab " * 100, "ÿ\x00\x01\x7f control", "Ā" * 20 + "ǅ",
]
SPECIAL_STRINGS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>", "</s>", "<unk>", "<pad>", "[CLS]", "[SEP]",
                   "<image>", "<|tool_call|>", "<think>", "</think>", " <sep> "]
MESSAGES = [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Café? 東京 <|im_end|>"},
     {"role": "assistant", "content": "Oui.", "tool_calls": None}, {"role": "user", "content": "  spaces  "}],
    [{"role": "user", "content": "Weather in Paris?"},
     {"role": "assistant", "content": None, "reasoning": "use the tool",
      "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
     {"role": "tool", "content": '{"temp": 21}', "tool_call_id": "c1"}],
]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Météo d'une ville — by name",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}]

DOCUMENTS = [{"title": "Paris", "text": "Capital of France."}, {"title": "東京", "text": "Capital of Japan."}]

_V5 = {"backend": "tokenizers", "tokenizer_class": "TokenizersBackend"}
_IM = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>", "unk_token": "<|endoftext|>"}


def _v4_added(tokenizer) -> dict:
    return {str(i): added_token(t.content, t.special) for i, t in tokenizer.get_added_tokens_decoder().items()}


def _smollm2_hub_style(dest, smollm2):
    """SmolLM2 as the Hub has it: a GPT2Tokenizer config from transformers 4 (the pipeline is rebuilt)."""
    tokenizer = Tokenizer.from_file(str(smollm2 / "tokenizer.json"))
    config = {"add_prefix_space": False, "added_tokens_decoder": _v4_added(tokenizer),
              "additional_special_tokens": ["<|im_start|>", "<|im_end|>"], "clean_up_tokenization_spaces": False,
              "model_max_length": 2048, "tokenizer_class": "GPT2Tokenizer", "vocab_size": 49152, **_IM,
              "chat_template": (smollm2 / "chat_template.jinja").read_text()}
    return write_folder(dest, tokenizer, config)


def _build(kind: str, dest):
    if kind == "v5_byte_level_tools_template":
        return write_folder(dest, byte_level(), {**_V5, **_IM, "model_max_length": 8192}, chat_template=TOOLS_TEMPLATE)
    if kind == "v4_llama_bos_by_post_processor":
        tok = llama_like()
        tok.add_tokens(["<|user|>"])
        config = {"add_bos_token": True, "add_eos_token": False, "added_tokens_decoder": _v4_added(tok),
                  "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": None, "legacy": False,
                  "chat_template": LLAMA_TEMPLATE, "clean_up_tokenization_spaces": False,
                  "model_max_length": 1000000000000000019884624838656, "tokenizer_class": "PreTrainedTokenizerFast"}
        return write_folder(dest, tok, config)
    if kind == "v4_gpt2_legacy_special_tokens_map":
        config = {"tokenizer_class": "GPT2TokenizerFast", "add_prefix_space": False, "errors": "replace",
                  "bos_token": {"__type": "AddedToken", "content": "<|endoftext|>", "lstrip": False,
                                "normalized": True, "rstrip": False, "single_word": False},
                  "model_max_length": 1024}
        special_map = {"bos_token": {"content": "<|endoftext|>", "lstrip": False, "normalized": True, "rstrip": False,
                                     "single_word": False},
                       "eos_token": "<|endoftext|>", "additional_special_tokens": ["<|im_start|>", "<|im_end|>"]}
        return write_folder(dest, byte_level(), config, model_type="gpt2", special_tokens_map=special_map)
    if kind == "gpt2_class_over_prefix_space_json":  # the JSON adds a prefix space, GPT2Tokenizer's rebuild does not
        tok = byte_level(add_prefix_space=True)
        config = {"tokenizer_class": "GPT2Tokenizer", "added_tokens_decoder": _v4_added(tok), **_IM}
        return write_folder(dest, tok, config, model_type="opt", chat_template=LLAMA_TEMPLATE)
    if kind == "gpt2_class_on_a_generic_model_type":
        return write_folder(dest, byte_level(add_prefix_space=True), {"tokenizer_class": "GPT2Tokenizer"},
                            model_type="granite")
    if kind == "model_specific_and_extra_tokens":
        tok = byte_level(("<|endoftext|>", "<image>", "<|tool_call|>"))
        config = {**_V5, "eos_token": "<|endoftext|>", "image_token": "<image>", "audio_token": "<audio>",
                  "extra_special_tokens": ["<|tool_call|>", "<extra_new>"],
                  "chat_template": [{"name": "default", "template": LLAMA_TEMPLATE},
                                    {"name": "tool_use", "template": TOOLS_TEMPLATE}]}
        return write_folder(dest, tok, config)
    if kind == "added_tokens_with_flags":
        tok = byte_level()
        added = _v4_added(tok)
        added[str(tok.get_vocab_size())] = added_token(" <sep> ", special=False, lstrip=True, rstrip=True)
        added[str(tok.get_vocab_size() + 1)] = added_token("<think>", special=False, normalized=False)
        added[str(tok.get_vocab_size() + 2)] = added_token("</think>", special=True)
        config = {"added_tokens_decoder": added, "tokenizer_class": "PreTrainedTokenizerFast", **_IM,
                  "additional_special_tokens": ["</think>"]}
        return write_folder(dest, tok, config, chat_template=TOOLS_TEMPLATE)
    if kind == "split_special_tokens":
        return write_folder(dest, byte_level(), {**_V5, **_IM, "split_special_tokens": True})
    if kind == "wordpiece_with_space_clean_up":
        config = {**_V5, "clean_up_tokenization_spaces": True, "unk_token": "[UNK]", "sep_token": "[SEP]",
                  "cls_token": "[CLS]", "pad_token": "[PAD]", "mask_token": "[MASK]"}
        return write_folder(dest, wordpiece(), config)
    if kind == "bpe_asking_for_space_clean_up":
        return write_folder(dest, byte_level(), {**_V5, **_IM, "clean_up_tokenization_spaces": True})
    if kind == "padding_and_truncation_in_json":
        tok = byte_level()
        tok.enable_padding(pad_id=0, pad_token="<|endoftext|>", length=64)
        tok.enable_truncation(max_length=8)
        return write_folder(dest, tok, {**_V5, "eos_token": "<|im_end|>"}, model_type=None)
    if kind == "named_chat_templates_in_files":
        return write_folder(dest, byte_level(), {**_V5, **_IM, "chat_template": "ignored {{ messages }}"},
                            chat_template=LLAMA_TEMPLATE, extra_templates={"tool_use": TOOLS_TEMPLATE})
    raise KeyError(kind)


KINDS = ["v5_byte_level_tools_template", "v4_llama_bos_by_post_processor", "v4_gpt2_legacy_special_tokens_map",
         "gpt2_class_over_prefix_space_json", "gpt2_class_on_a_generic_model_type", "model_specific_and_extra_tokens",
         "added_tokens_with_flags", "split_special_tokens", "wordpiece_with_space_clean_up",
         "bpe_asking_for_space_clean_up", "padding_and_truncation_in_json", "named_chat_templates_in_files"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("tokenizers")
    return lambda kind: _build(kind, root / kind) if not (root / kind).exists() else root / kind


def _pair(folder):
    fast = FastTokenizer.from_folder(folder)
    hf = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    hf.encode("warm up")  # transformers turns padding and truncation off at its first encode
    assert type(hf).__name__ == read_tokenizer_files(folder).tokenizer_class
    return fast, hf


def assert_equivalent(fast, hf, id_stride: int = 1) -> None:
    assert fast.backend_tokenizer.to_str() == hf.backend_tokenizer.to_str()
    for name in ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token",
                 "bos_token_id", "eos_token_id", "unk_token_id", "pad_token_id", "sep_token_id", "model_max_length",
                 "vocab_size", "chat_template", "special_tokens_map", "all_special_tokens", "all_special_ids",
                 "extra_special_tokens", "clean_up_tokenization_spaces", "is_fast"):
        assert getattr(fast, name) == getattr(hf, name), name
    assert len(fast) == len(hf) and fast.get_vocab() == hf.get_vocab()
    texts = TEXTS + SPECIAL_STRINGS + [f"a{s}b {s} c{s}{s}" for s in SPECIAL_STRINGS]
    for text in texts:
        for add in (True, False):
            assert fast.encode(text, add_special_tokens=add) == hf.encode(text, add_special_tokens=add), (text, add)
    assert fast.encode("first", "second") == hf.encode("first", "second")
    ids = list(range(0, len(hf), id_stride))
    assert fast.convert_ids_to_tokens(ids) == hf.convert_ids_to_tokens(ids)
    assert fast.convert_ids_to_tokens(ids, skip_special_tokens=True) == hf.convert_ids_to_tokens(
        ids, skip_special_tokens=True)
    assert fast.convert_ids_to_tokens(ids[-1]) == hf.convert_ids_to_tokens(ids[-1])
    assert fast.convert_tokens_to_ids(SPECIAL_STRINGS + ["not-a-token"]) == hf.convert_tokens_to_ids(
        SPECIAL_STRINGS + ["not-a-token"])
    for skip in (True, False):
        for i in ids:
            assert fast.decode([i], skip_special_tokens=skip) == hf.decode([i], skip_special_tokens=skip), i
        assert fast.decode(ids, skip_special_tokens=skip) == hf.decode(ids, skip_special_tokens=skip)
        for text in texts:
            encoded = hf.encode(text)
            assert fast.decode(encoded, skip_special_tokens=skip) == hf.decode(encoded, skip_special_tokens=skip)
    assert fast.decode([ids[:5], ids[5:9]]) == hf.decode([ids[:5], ids[5:9]])
    assert fast.decode(ids[3]) == hf.decode(ids[3])
    if hf.chat_template:
        assert_same_chats(fast, hf)


def assert_same_chats(fast, hf) -> None:
    for messages in MESSAGES:
        for generation_prompt in (True, False):
            for extra in ({}, {"tools": TOOLS}, {"tools": TOOLS, "date": "1 May 2026"}, {"documents": DOCUMENTS}):
                try:
                    expected = hf.apply_chat_template(messages, tokenize=False,
                                                      add_generation_prompt=generation_prompt, **extra)
                except Exception as exc:  # noqa: BLE001 - a template may refuse a chat: so must ours
                    with pytest.raises(type(exc)):
                        fast.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt,
                                                 **extra)
                    continue
                assert fast.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt,
                                                **extra) == expected
                assert fast.apply_chat_template(messages, add_generation_prompt=generation_prompt, **extra,
                                                return_dict=False) == hf.apply_chat_template(
                    messages, add_generation_prompt=generation_prompt, **extra, return_dict=False)
    got = fast.apply_chat_template(MESSAGES[0])
    want = hf.apply_chat_template(MESSAGES[0])
    assert got == {"input_ids": want["input_ids"], "attention_mask": want["attention_mask"]}


@pytest.mark.parametrize("kind", KINDS)
def test_built_folders_match_transformers(built, kind):
    assert_equivalent(*_pair(built(kind)))


def test_the_tiny_model_folders_match_transformers(tiny_llama_dir, tiny_opt_dir):
    for folder in (tiny_llama_dir, tiny_opt_dir):
        assert_equivalent(*_pair(folder))


@pytest.mark.slow
def test_smollm2_matches_transformers(smollm2_dir, tmp_path):
    assert_equivalent(*_pair(smollm2_dir), id_stride=7)
    hub_style = _smollm2_hub_style(tmp_path / "hub-style", smollm2_dir)
    fast, hf = _pair(hub_style)
    assert type(hf).__name__ == "GPT2Tokenizer"
    assert_equivalent(fast, hf, id_stride=7)


def test_the_llama_style_bos_comes_from_the_post_processor(built):
    fast, hf = _pair(built("v4_llama_bos_by_post_processor"))
    assert fast.encode("hi")[0] == fast.bos_token_id == hf.encode("hi")[0]
    assert fast.bos_token_id not in fast.encode("hi", add_special_tokens=False)
    assert fast.pad_token is None and fast.pad_token_id is None


def test_a_chat_template_that_refuses_a_role_raises_as_transformers_does(built):
    fast, hf = _pair(built("v5_byte_level_tools_template"))
    bad = [{"role": "robot", "content": "beep"}]
    with pytest.raises(Exception) as expected:
        hf.apply_chat_template(bad, tokenize=False)
    with pytest.raises(type(expected.value), match="unknown role robot"):
        fast.apply_chat_template(bad, tokenize=False)


def test_options_that_need_transformers_are_refused(built):
    fast = FastTokenizer.from_folder(built("v5_byte_level_tools_template"))
    with pytest.raises(NotImplementedError, match="return_tensors"):
        fast.apply_chat_template(MESSAGES[0], return_tensors="pt")
    with pytest.raises(NotImplementedError, match="batch"):
        fast.apply_chat_template([MESSAGES[0], MESSAGES[1]])
    with pytest.raises(ValueError, match="str"):
        fast.encode(["a", "batch"])


_TEXT = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=60),
    st.lists(st.one_of(st.sampled_from(SPECIAL_STRINGS + [" ", "\n", "  "]), st.text(max_size=8)), max_size=8).map(
        "".join),
)


@pytest.fixture(scope="module")
def fuzz_pairs(built):
    return [_pair(built(kind)) for kind in ("v5_byte_level_tools_template", "v4_llama_bos_by_post_processor",
                                              "added_tokens_with_flags", "wordpiece_with_space_clean_up")]


@given(text=_TEXT, add=st.booleans(), skip=st.booleans())
def test_random_text_encodes_and_decodes_the_same(fuzz_pairs, text, add, skip):
    for fast, hf in fuzz_pairs:
        ids = hf.encode(text, add_special_tokens=add)
        assert fast.encode(text, add_special_tokens=add) == ids
        assert fast.decode(ids, skip_special_tokens=skip) == hf.decode(ids, skip_special_tokens=skip)


@pytest.fixture(scope="module")
def smollm2_pair(smollm2_dir):
    return _pair(smollm2_dir)


@pytest.mark.slow
@given(text=_TEXT, add=st.booleans())
def test_random_text_encodes_and_decodes_the_same_on_smollm2(smollm2_pair, text, add):
    fast, hf = smollm2_pair
    ids = hf.encode(text, add_special_tokens=add)
    assert fast.encode(text, add_special_tokens=add) == ids
    assert fast.decode(ids, skip_special_tokens=True) == hf.decode(ids, skip_special_tokens=True)


# --- loading -----------------------------------------------------------------------------------


def test_load_tokenizer_returns_a_fast_tokenizer(tiny_llama_dir):
    assert isinstance(load_tokenizer(tiny_llama_dir), FastTokenizer)
    assert loader_load_tokenizer is load_tokenizer  # models.loader keeps its name for it


def test_a_folder_it_cannot_reproduce_falls_back_to_transformers_with_one_log_line(built, tmp_path, caplog):
    folder = tmp_path / "qwen2-class"
    write_folder(folder, byte_level(), {"tokenizer_class": "Qwen2Tokenizer", **_IM}, model_type="qwen2")
    with caplog.at_level(logging.INFO, logger="llm_byoc.models.fast_tokenizer"):
        tokenizer = load_tokenizer(folder)
    assert type(tokenizer).__name__ == "Qwen2Tokenizer"
    lines = [r.getMessage() for r in caplog.records if r.name == "llm_byoc.models.fast_tokenizer"]
    assert len(lines) == 1 and "loaded with transformers" in lines[0] and "Qwen2Tokenizer" in lines[0]


def test_a_folder_without_tokenizer_json_falls_back(tiny_llama_dir, tmp_path, caplog):
    folder = tmp_path / "vocab-merges"
    AutoTokenizer.from_pretrained(tiny_llama_dir).save_pretrained(folder)
    saved = json.loads((folder / "tokenizer.json").read_text())
    (folder / "vocab.json").write_text(json.dumps(saved["model"]["vocab"]))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(" ".join(m) for m in saved["model"]["merges"]))
    (folder / "tokenizer.json").unlink()
    config = json.loads((folder / "tokenizer_config.json").read_text()) | {"tokenizer_class": "GPT2Tokenizer"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with caplog.at_level(logging.INFO, logger="llm_byoc.models.fast_tokenizer"):
        tokenizer = load_tokenizer(folder)
    assert not isinstance(tokenizer, FastTokenizer) and tokenizer.encode("Hello world")
    assert "no tokenizer.json" in caplog.text


def test_an_unloadable_folder_is_a_model_load_error(tmp_path):
    from llm_byoc.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match="cannot load the tokenizer"):
        load_tokenizer(tmp_path)


def test_the_front_end_loads_its_tokenizer_without_torch_or_transformers(built):
    folder = built("v5_byte_level_tools_template")
    script = textwrap.dedent(f"""
        import sys
        import llm_byoc.api.wsgi, llm_byoc.engine.llm_engine, llm_byoc.engine.remote_core  # the HTTP worker's modules
        from llm_byoc.models.fast_tokenizer import load_tokenizer
        tokenizer = load_tokenizer({str(folder)!r})
        text = tokenizer.apply_chat_template([{{"role": "user", "content": "hi"}}], tokenize=False,
                                             add_generation_prompt=True)
        assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text
        heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
        assert not heavy, heavy
        """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
