from __future__ import annotations

import pytest
from llm_byoc.client.errors import StreamError
from llm_byoc.client.sse import SSEDecoder, SSEMessage

STREAM = (
    'data: {"token": {"text": "안녕"}}\n\n'
    ": keep-alive\n"
    'data: {"token": {"text": "🙂👍"}}\n\n'
    "event: error\r\ndata: line one\r\ndata: line two\r\n\r\n"
    "data: [DONE]\n\n"
).encode("utf-8")

EXPECTED = [
    SSEMessage("message", '{"token": {"text": "안녕"}}'),
    SSEMessage("message", '{"token": {"text": "🙂👍"}}'),
    SSEMessage("error", "line one\nline two"),
    SSEMessage("message", "[DONE]"),
]


def decode(chunks: list[bytes]) -> list[SSEMessage]:
    decoder = SSEDecoder()
    messages = [m for chunk in chunks for m in decoder.feed(chunk)]
    return messages + decoder.close()


def test_whole_stream_in_one_chunk():
    assert decode([STREAM]) == EXPECTED


def test_every_single_cut_point_gives_the_same_events():
    # Covers cuts inside each multi-byte character (Korean: 3 bytes, emoji: 4)
    # and between the CR and LF of a CRLF.
    for cut in range(1, len(STREAM)):
        assert decode([STREAM[:cut], STREAM[cut:]]) == EXPECTED, f"cut at byte {cut}"


def test_byte_by_byte():
    assert decode([STREAM[i : i + 1] for i in range(len(STREAM))]) == EXPECTED


def test_events_come_out_as_soon_as_they_are_complete():
    decoder = SSEDecoder()
    first = 'data: {"a": "한"}\n\n'.encode()
    assert decoder.feed(first[:-1]) == []  # blank line not seen yet
    assert decoder.feed(first[-1:]) == [SSEMessage("message", '{"a": "한"}')]
    emoji = "data: 🙂\n\n".encode()
    assert decoder.feed(emoji[:7]) == []  # half the emoji held back, not garbled
    assert decoder.feed(emoji[7:]) == [SSEMessage("message", "🙂")]


def test_final_event_without_blank_line_is_kept():
    assert decode([b"data: last"]) == [SSEMessage("message", "last")]


def test_lone_cr_line_endings():
    assert decode([b"data: a\r\rdata: b\r\r"]) == [SSEMessage("message", "a"), SSEMessage("message", "b")]


def test_stream_cut_inside_a_character_is_an_error():
    decoder = SSEDecoder()
    decoder.feed("data: 한".encode()[:-1])
    with pytest.raises(StreamError, match="middle of a UTF-8 character"):
        decoder.close()


def test_invalid_utf8_is_an_error():
    with pytest.raises(StreamError, match="not valid UTF-8"):
        SSEDecoder().feed(b"data: \xff\xfe\n\n")
