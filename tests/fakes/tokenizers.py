"""Small tokenizers built in memory, of the two kinds detokenization must handle.

- ``byte_level_bpe()``: GPT-2/SmolLM2 style; characters outside the training
  text become several byte tokens, so an emoji or a Korean syllable is split
  across tokens.
- ``sentencepiece_like()``: Llama style (metaspace "▁" for spaces, byte
  fallback tokens such as <0xEA>); a token decoded alone loses its leading space.
"""

from __future__ import annotations

from functools import cache

from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world! How are you today? I am fine, thank you.",
    "A model server streams tokens back to the client.",
    "Continuous batching lets new sequences join a running batch.",
] * 4
SPECIALS = ["<pad>", "<s>", "</s>"]  # ids 0, 1, 2


def _wrap(tok: Tokenizer):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>")


@cache
def byte_level_bpe():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    return _wrap(tok)


@cache
def sentencepiece_like():
    def build(bpe: models.BPE) -> Tokenizer:
        tok = Tokenizer(bpe)
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
        tok.decoder = decoders.Sequence(
            [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
        )
        return tok

    trained = build(models.BPE(unk_token="<unk>"))
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=SPECIALS + ["<unk>"], show_progress=False)
    trained.train_from_iterator(CORPUS, trainer=trainer)
    # Byte tokens are ordinary vocabulary entries (as in Llama), not special tokens.
    vocab = trained.get_vocab()
    for i in range(256):
        vocab.setdefault(f"<0x{i:02X}>", len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in _merges(trained)]
    tok = build(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True))
    tok.add_special_tokens(SPECIALS + ["<unk>"])
    return _wrap(tok)


def _merges(tok: Tokenizer) -> list:
    import json

    return json.loads(tok.to_str())["model"]["merges"]
