"""Every sampling field becomes the vllm.SamplingParams field that means the same (vLLM itself is not installed
here: a stand-in module records what it is given)."""

from __future__ import annotations

import enum
import sys
import types

import pytest

from llm_byoc.engine import vllm_mapping
from llm_byoc.protocol import GrammarSpec, SamplingParams


@pytest.fixture
def vllm_stub(monkeypatch):
    vllm = types.ModuleType("vllm")
    sampling = types.ModuleType("vllm.sampling_params")
    vllm.SamplingParams = lambda **kwargs: kwargs
    sampling.RequestOutputKind = enum.Enum("RequestOutputKind", "CUMULATIVE DELTA FINAL_ONLY")
    sampling.StructuredOutputsParams = lambda **kwargs: ("structured", kwargs)
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sampling)
    return vllm


def test_every_sampling_field_is_mapped(vllm_stub):
    params = SamplingParams(max_new_tokens=9, temperature=0.7, top_p=0.9, top_k=40, repetition_penalty=1.2,
                            stop=("x",), seed=3, ignore_eos=True, logprobs=True, top_logprobs=2, min_tokens=1,
                            presence_penalty=0.5, frequency_penalty=-0.5, min_p=0.05,
                            logit_bias=((5, 10.0), (7, -100.0)), stop_token_ids=(11, 12),
                            grammar=GrammarSpec("regex", "a+"))
    mapped = vllm_mapping.sampling_params(params, 9)
    assert mapped["min_p"] == 0.05 and mapped["logit_bias"] == {5: 10.0, 7: -100.0}
    assert mapped["stop_token_ids"] == [11, 12] and mapped["top_k"] == 40 and mapped["repetition_penalty"] == 1.2
    assert mapped["logprobs"] == 2 and mapped["structured_outputs"] == ("structured", {"regex": "a+"})
    assert "stop" not in mapped  # stop strings stay the front end's
    assert mapped["prompt_logprobs"] is None
    assert vllm_mapping.sampling_params(SamplingParams(prompt_logprobs=3), 4)["prompt_logprobs"] == 3
    plain = vllm_mapping.sampling_params(SamplingParams(), 4)
    assert plain["logit_bias"] is None and plain["stop_token_ids"] is None and plain["top_k"] == -1
