"""A bad engine choice stops `serve` before /ping turns 200: one clear log line, exit non-zero, no traceback loop."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest
from serve_helpers import SERVE, Server

pytestmark = pytest.mark.slow

VLLM_PYTHON = os.environ.get("LLM_BYOC_VLLM_PYTHON", "")


def _exit_code_and_log(server: Server, timeout_s: float = 180) -> tuple[int, str]:
    try:
        code = server.proc.wait(timeout_s)
    finally:
        server.stop()
    return code, server.log_path.read_text(errors="replace")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed in this Python")
def test_vllm_asked_for_where_it_is_not_installed(smollm2_dir, tmp_path):
    server = Server(smollm2_dir, tmp_path / "serve.log", command=[sys.executable, str(SERVE), "serve"],
                    LLM_BYOC_ENGINE="vllm")
    code, log = _exit_code_and_log(server)
    assert code != 0
    assert "LLM_BYOC_ENGINE=vllm but vLLM is not installed in this image" in log
    assert "Traceback" not in log


@pytest.mark.skipif(not VLLM_PYTHON, reason="LLM_BYOC_VLLM_PYTHON is not set (container/install_vllm_cpu.sh)")
def test_tensor_parallel_on_a_cpu_is_refused_before_vllm_starts(smollm2_dir, tmp_path):
    server = Server(smollm2_dir, tmp_path / "serve.log", command=[VLLM_PYTHON, str(SERVE), "serve"],
                    LLM_BYOC_ENGINE="vllm", LLM_BYOC_TENSOR_PARALLEL_SIZE="2")
    code, log = _exit_code_and_log(server)
    assert code != 0
    assert "LLM_BYOC_TENSOR_PARALLEL_SIZE and LLM_BYOC_PIPELINE_PARALLEL_SIZE are for GPUs" in log
    assert "Traceback" not in log and "starting vLLM" not in log


@pytest.mark.skipif(not VLLM_PYTHON, reason="LLM_BYOC_VLLM_PYTHON is not set (container/install_vllm_cpu.sh)")
def test_a_kv_cache_too_small_for_one_sequence_is_refused_before_vllm_starts(smollm2_dir, tmp_path):
    server = Server(smollm2_dir, tmp_path / "serve.log", command=[VLLM_PYTHON, str(SERVE), "serve"],
                    LLM_BYOC_ENGINE="vllm", LLM_BYOC_KV_CACHE_MEMORY="1MiB")
    code, log = _exit_code_and_log(server)
    assert code != 0
    [line] = [line for line in log.splitlines() if "vLLM could not load the model" in line and "engine dead" not in line]
    assert "holds 22 tokens; one 4096-token sequence (LLM_BYOC_MAX_MODEL_LEN) needs 0.176 GiB" in line  # fp32
    assert "Traceback" not in log and "starting vLLM" not in log


@pytest.mark.skipif(not VLLM_PYTHON, reason="LLM_BYOC_VLLM_PYTHON is not set (container/install_vllm_cpu.sh)")
def test_a_quantization_vllm_cannot_apply_is_one_line(smollm2_dir, tmp_path):
    server = Server(smollm2_dir, tmp_path / "serve.log", command=[VLLM_PYTHON, str(SERVE), "serve"],
                    LLM_BYOC_ENGINE="vllm", LLM_BYOC_QUANTIZATION="awq")
    code, log = _exit_code_and_log(server)
    assert code != 0
    [line] = [line for line in log.splitlines() if "vLLM could not load the model" in line and "engine dead" not in line]
    assert "vLLM refused the configuration: " in line and "awq" in line  # an fp32 checkpoint has no AWQ config
    assert "Traceback" not in log and "input_value=" not in log
