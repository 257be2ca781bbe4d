"""reasoning_content: <think> ... </think> split off the answer, whole and piece by piece."""

from __future__ import annotations

import pytest

from llm_byoc.schemas.reasoning import ReasoningSplitter, prompt_opens_thinking, split_answer, template_thinks

QWEN3 = "<think>\nThe user wants a greeting.\n</think>\n\nHello!"


def streamed(text: str, size: int, from_start: bool) -> tuple[str, str]:
    splitter = ReasoningSplitter(from_start)
    thought = content = ""
    for i in range(0, len(text), size):
        r, c = splitter.feed(text[i:i + size])
        thought, content = thought + r, content + c
    r, c = splitter.finish()
    return thought + r, content + c


@pytest.mark.parametrize("size", [1, 2, 5, 1000])
def test_thinking_is_split_from_the_answer_however_it_is_cut(size):
    assert streamed(QWEN3, size, False) == ("\nThe user wants a greeting.\n", "Hello!")
    assert split_answer(QWEN3, False) == ("\nThe user wants a greeting.\n", "Hello!")


@pytest.mark.parametrize("size", [1, 3, 1000])
def test_a_prompt_that_opened_think_starts_the_answer_thinking(size):
    """DeepSeek-R1's template writes <think> into the generation prompt: the answer holds only </think>."""
    assert streamed("weighing it</think>Yes.", size, True) == ("weighing it", "Yes.")


def test_no_think_is_all_content_and_a_cut_off_thought_is_all_reasoning():
    assert split_answer("Hello <b>there</b>", False) == ("", "Hello <b>there</b>")
    assert split_answer("<thin", False) == ("", "<thin")
    assert split_answer("<think>still thinking", False) == ("still thinking", "")
    assert split_answer("a < b", True) == ("a < b", "")


def test_when_a_prompt_opens_thinking_and_when_a_template_thinks():
    assert prompt_opens_thinking("<|im_start|>assistant\n<think>\n")
    assert not prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n")  # enable_thinking false
    assert not prompt_opens_thinking("<|im_start|>assistant\n")
    assert template_thinks("{{ '<think>' }}{{ c }}{{ '</think>' }}") and not template_thinks("{{ messages }}")
