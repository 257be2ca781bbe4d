"""The rotation folded into a Llama-family decoder for int8 (worker/rotation.py): Q is orthogonal and what its
factors say, and in float32 a rotated decoder, with or without a LoRA adapter, computes what the checkpoint does."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from fixtures.adapters import make_adapter
from fixtures.step_driver import Request, drive
from llm_byoc.adapters.peft_folder import BaseShapes, check_adapter
from llm_byoc.config import EngineConfig
from llm_byoc.protocol import SamplingParams
from llm_byoc.worker import loading
from llm_byoc.worker.linear import linear_factory
from llm_byoc.worker.models import decoder_config, load_decoder
from llm_byoc.worker.rotation import Rotation, dct, hadamard
from llm_byoc.worker.runner import ModelRunner
from test_native_load import prefill_logits, save_layout

CPU = torch.device("cpu")


@pytest.mark.parametrize("hidden, factors", [(576, (9, 64)), (64, (64,)), (4096, (64, 64)), (96, (3, 32)), (7, (7,))])
def test_q_is_orthogonal_and_made_of_its_factors(hidden, factors):
    rotation = Rotation.for_hidden(hidden)
    assert tuple(f.shape[0] for f in rotation.factors) == factors
    q = rotation.matrix()
    torch.testing.assert_close(q @ q.t(), torch.eye(hidden), atol=1e-5, rtol=0)
    kron = torch.ones(1, 1, dtype=torch.float64)
    for f in rotation.factors:
        kron = torch.kron(kron, f.double())
    torch.testing.assert_close(q.double(), rotation.signs.double()[:, None] * kron, atol=1e-6, rtol=0)
    assert set(rotation.signs.tolist()) == {-1.0, 1.0}
    w = torch.randn(5, hidden)
    torch.testing.assert_close(rotation.right(w), w @ q, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rotation.left_transposed(w.t()), q.t() @ w.t(), atol=1e-5, rtol=1e-5)


def test_the_factors_are_orthonormal_and_the_same_every_time():
    for matrix in (hadamard(32), dct(9)):
        torch.testing.assert_close(matrix @ matrix.t(), torch.eye(matrix.shape[0], dtype=torch.float64))
    assert torch.equal(Rotation.for_hidden(576).matrix(), Rotation.for_hidden(576).matrix())
    with pytest.raises(ValueError, match="power of two"):
        hadamard(12)


@pytest.mark.parametrize("name", ["llama", "llama-tied", "llama-biases-head-dim", "qwen2-biases", "qwen3",
                                  "phi3-tied", "mistral-window"])
def test_a_rotated_float_decoder_computes_what_the_checkpoint_does(name, tiny_llama_dir, tmp_path):
    folder = Path(save_layout(name, tiny_llama_dir, tmp_path))
    config = decoder_config(json.loads((folder / "config.json").read_text()))
    plain, _ = load_decoder(folder, config, CPU, torch.float32, linear_factory("aten"))
    rotated, _ = load_decoder(folder, config, CPU, torch.float32, linear_factory("aten"), rotate=True)
    assert plain.rotation is None and rotated.rotation is not None
    assert not torch.equal(rotated.embed, plain.embed)  # the weights did change
    tokens = [5, 9, 30, 41, 7, 100, 200, 3, 17]
    expected = prefill_logits(plain, tokens)
    torch.testing.assert_close(prefill_logits(rotated, tokens), expected, rtol=1e-4,
                               atol=1e-5 * expected.abs().max().item())


def test_routed_experts_are_not_rotated(tiny_llama_dir, tmp_path):
    folder = Path(save_layout("mixtral", tiny_llama_dir, tmp_path))
    config = decoder_config(json.loads((folder / "config.json").read_text()))
    decoder, _ = load_decoder(folder, config, CPU, torch.float32, linear_factory("aten"), rotate=True)
    assert decoder.rotation is None


def test_int8_rotates_and_float32_does_not(tiny_llama_dir):
    int8 = ModelRunner.from_config(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=2, quantization="int8"))
    assert int8.decoder.rotation is not None
    assert ModelRunner.from_config(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=2)).decoder.rotation is None


def _prompt_logprobs(runner, prompt, adapter=None) -> list[float]:
    params = SamplingParams(max_new_tokens=1, prompt_logprobs=0)
    result = drive(runner, [Request("p", prompt, params, 0, adapter)], num_slots=2, token_budget=64, max_loras=2)
    return result.prompt_logprobs["p"].logprobs[1:]


def test_a_lora_adapter_on_a_rotated_decoder_adds_what_it_adds_unrotated(tiny_llama_dir, tmp_path, monkeypatch):
    plain = ModelRunner.from_config(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=2, max_loras=2))
    original = loading.load_decoder
    monkeypatch.setattr(loading, "load_decoder", lambda *args, **kwargs: original(*args, **{**kwargs, "rotate": True}))
    rotated = ModelRunner.from_config(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=2, max_loras=2))
    assert rotated.decoder.rotation is not None and rotated.info.linear_backend != "int8"
    info = plain.info
    shapes = BaseShapes(info.model_type, info.num_layers, {k: tuple(v) for k, v in info.lora_modules.items()})
    folder = make_adapter(tiny_llama_dir, tmp_path / "all8", rank=8, seed=5)
    adapter = check_adapter("all8", str(folder), "all8#1", (str(tmp_path),), 64, shapes)
    rng = random.Random(4)
    prompt = [rng.randrange(3, 384) for _ in range(30)]
    expected = _prompt_logprobs(plain, prompt, adapter)
    base = _prompt_logprobs(plain, prompt)
    assert max(abs(a - b) for a, b in zip(expected, base)) > 0.1  # the adapter matters
    torch.testing.assert_close(torch.tensor(_prompt_logprobs(rotated, prompt, adapter)), torch.tensor(expected),
                               atol=1e-4, rtol=0)
