"""Incremental detokenization and stop strings."""

from __future__ import annotations

import pytest
from fakes.tokenizers import byte_level_bpe, sentencepiece_like
from llm_byoc.engine.detokenizer import IncrementalDetokenizer, StopStringMatcher

TEXTS = [
    "Hello 세계 🎉 the fox jumps",
    "the quick brown fox 🦊🦊 and 한국어 text",
    "  spaces   and\nnew lines ✓",
]


def stream(tokenizer, prompt_ids, generated_ids) -> list[str]:
    detok = IncrementalDetokenizer(tokenizer, prompt_ids)
    pieces = [detok.add(t) for t in generated_ids]
    pieces.append(detok.flush())
    return pieces


@pytest.mark.parametrize("make_tokenizer", [byte_level_bpe, sentencepiece_like])
@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("split", [1, 3, 6])
def test_streamed_text_equals_full_decode_and_never_half_a_character(make_tokenizer, text, split):
    tok = make_tokenizer()
    ids = tok.encode(text)
    prompt, generated = ids[:split], ids[split:]
    pieces = stream(tok, prompt, generated)
    expected = tok.decode(ids)[len(tok.decode(prompt)) :]
    assert "".join(pieces) == expected
    assert not any("\ufffd" in p for p in pieces)


def test_multibyte_character_split_over_tokens_is_held_back():
    tok = byte_level_bpe()
    prompt = tok.encode("Hello")
    emoji = tok.encode("🎉")
    assert len(emoji) > 1  # the test needs a character spread over several tokens
    detok = IncrementalDetokenizer(tok, prompt)
    pieces = [detok.add(t) for t in emoji]
    assert pieces[:-1] == [""] * (len(emoji) - 1)
    assert pieces[-1] == "🎉"


def test_sentencepiece_keeps_the_leading_space_of_a_word():
    tok = sentencepiece_like()
    ids = tok.encode("the fox")
    assert tok.decode(ids[-1:]) == "fox"  # alone, the space is lost
    assert stream(tok, ids[:-1], ids[-1:]) == [" fox", ""]


def test_special_tokens_are_skipped():
    tok = byte_level_bpe()
    pieces = stream(tok, tok.encode("Hello"), [tok.eos_token_id])
    assert "".join(pieces) == ""


def test_flush_gives_an_incomplete_character_as_replacement():
    tok = byte_level_bpe()
    first_byte = tok.encode("🎉")[0]
    pieces = stream(tok, tok.encode("Hi"), [first_byte])
    assert pieces == ["", "\ufffd"]


def feed_all(matcher: StopStringMatcher, pieces: list[str]) -> str:
    out = "".join(matcher.feed(p) for p in pieces)
    return out + matcher.flush()


def test_stop_string_cuts_text_and_drops_what_follows():
    m = StopStringMatcher(["###"])
    assert feed_all(m, ["Hello wor", "ld ###", " more text"]) == "Hello world "
    assert m.stopped


def test_stop_string_spanning_pieces_is_held_back_until_resolved():
    m = StopStringMatcher(["STOP"])
    assert m.feed("abc S") == "abc "
    assert m.feed("T") == ""
    assert m.feed("O") == ""
    assert m.feed("P and more") == ""
    assert m.stopped


def test_false_start_of_a_stop_string_is_released():
    m = StopStringMatcher(["STOP"])
    assert m.feed("a ST") == "a "
    assert m.feed("ART") == "START"
    assert not m.stopped
    assert m.feed(" S") == " "
    assert m.flush() == "S"  # generation ended: a held partial match is plain text


def test_earliest_of_several_stop_strings_wins():
    m = StopStringMatcher(["world", "lo w"])
    assert feed_all(m, ["Hel", "lo world"]) == "Hel"


def test_no_stop_strings_passes_text_through():
    m = StopStringMatcher([])
    assert m.feed("any text") == "any text" and m.flush() == ""
