"""The GPU image (`docker build --build-arg DEVICE=cuda`) checked on a machine without a GPU:
it builds from python:3.11-slim and PyPI's CUDA torch wheel, torch is the CUDA build, the CUDA
runtime, cuBLAS and cuDNN load, `serve` fails with one clear line where no GPU is visible
(the image defaults to LLM_BYOC_DEVICE=cuda), and LLM_BYOC_DEVICE=auto serves on the CPU with a
warning. What needs a GPU is local_test/check_gpu_image.sh's job.

LLM_BYOC_TEST_GPU_IMAGE=1 runs it (.ci/run sets it): the build downloads about 4 GB from PyPI
(about 4 minutes on a fresh 2-core machine, then Docker's layer cache) and the image is 9.5 GB.
Without it the test skips, which under .ci/run would be a failure. The tag is
LLM_BYOC_TEST_GPU_IMAGE_TAG (default llm-byoc:e2e-gpu).
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import pytest
import requests

from docker_helpers import REPO, REQUIRE_ENV, build_image, docker, docker_reachable, make_readable, running_container

OPT_IN = "LLM_BYOC_TEST_GPU_IMAGE"
TAG = os.environ.get("LLM_BYOC_TEST_GPU_IMAGE_TAG", "llm-byoc:e2e-gpu")
EXIT_WITHIN_S = 180

pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get(OPT_IN) != "1", reason=f"{OPT_IN}=1 builds and checks the GPU image (~4 GB from PyPI)"),
]


@pytest.fixture(scope="module")
def gpu_image() -> str:
    reason = docker_reachable()
    if reason is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {reason}")
        pytest.skip(reason)
    return build_image(TAG, DEVICE="cuda")


@pytest.fixture(scope="module")
def model_dir(tiny_llama_dir):
    make_readable(tiny_llama_dir)  # readable by the container's unprivileged user whatever the files' modes
    return tiny_llama_dir


def test_image_defaults_to_cuda_and_asks_the_toolkit_for_compute(gpu_image):
    config = json.loads(docker("image", "inspect", gpu_image).stdout)[0]
    env = dict(item.split("=", 1) for item in config["Config"]["Env"])
    assert env["LLM_BYOC_DEVICE"] == "cuda"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    assert config["Config"]["Entrypoint"] == ["serve"]
    size = config["Size"]
    print(f"{gpu_image}: {size / 1e9:.2f} GB")
    assert 6e9 < size < 12e9  # torch + CUDA libraries (~5 GB) and vLLM (~4 GB) are in; the CPU image is ~1.7 GB


def test_torch_is_the_cuda_build_and_the_cuda_libraries_load(gpu_image):
    probe = (REPO / "local_test" / "gpu_probe.py").read_text()
    result = subprocess.run(["docker", "run", "--rm", "-i", "--entrypoint", "python", gpu_image, "-"],
                            input=probe, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    print(report)
    assert report["torch"].startswith("2.13.0") and report["torch_cuda"]  # not the +cpu wheel
    assert report["cudnn"] and not report["cuda_available"]
    assert set(report["libraries"]) == {"libcudart", "libcublas", "libcublasLt", "libcudnn"}
    major, minor = report["torch_cuda"].split(".")
    assert report["cudart_version"] == 1000 * int(major) + 10 * int(minor)  # the runtime answers: it loaded
    assert report["cudart_devices"] == "error 35"  # cudaErrorInsufficientDriver: no driver mounted here


def test_vllm_is_installed_beside_the_package_with_the_same_torch(gpu_image):
    script = ("import json, torch, transformers, vllm, llm_byoc.engine.vllm_core; "
              "print(json.dumps({'vllm': vllm.__version__, 'torch': torch.__version__, "
              "'transformers': transformers.__version__}))")
    result = docker("run", "--rm", "--entrypoint", "python", gpu_image, "-c", script, timeout=300)
    versions = json.loads(result.stdout.strip().splitlines()[-1])
    print(versions)
    assert versions["vllm"] == "0.32.0" and versions["torch"] == "2.13.0+cu130"
    assert versions["transformers"].startswith("5.19")  # vLLM's pin (<5.20), not ours


def _exit_code_and_logs(gpu_image: str, model_dir, **env: str) -> tuple[int, str]:
    """`serve` in the image where no GPU is visible, until it exits: (its exit code, its log)."""
    name = f"llm-byoc-e2e-gpu-{uuid.uuid4().hex[:8]}"
    settings = [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]
    docker("run", "-d", "--name", name, "-v", f"{model_dir}:/opt/ml/model:ro", *settings, gpu_image, "serve")
    try:
        exit_code = int(docker("wait", name, timeout=EXIT_WITHIN_S).stdout.strip())
        logs = docker("logs", name).stderr
    finally:
        docker("rm", "-f", name, check=False)
    print(logs[-3000:])
    return exit_code, logs


def test_the_vllm_engine_without_a_gpu_exits_with_one_clear_line(gpu_image, model_dir):
    exit_code, logs = _exit_code_and_logs(gpu_image, model_dir, LLM_BYOC_ENGINE="vllm", LLM_BYOC_DEVICE="auto")
    assert exit_code == 1 and "Traceback" not in logs
    [line] = [line for line in logs.splitlines() if "vLLM could not load the model" in line and "ERROR" in line
              and "engine dead" not in line]
    assert "vLLM 0.32.0 finds no device it can run on" in line and "LLM_BYOC_ENGINE=native" in line


def test_serve_without_a_gpu_exits_with_one_clear_line(gpu_image, model_dir):
    exit_code, logs = _exit_code_and_logs(gpu_image, model_dir, LLM_BYOC_NUM_THREADS="1")
    assert exit_code == 1
    assert "Traceback" not in logs
    [line] = [line for line in logs.splitlines() if "model load failed" in line]
    assert "LLM_BYOC_DEVICE=cuda, but torch 2.13.0" in line and "sees no CUDA device (" in line
    assert "docker run --gpus all" in line and "LLM_BYOC_DEVICE=cpu" in line
    assert "engine exited unexpectedly with code 1" in logs


def test_auto_without_a_gpu_serves_on_the_cpu_and_says_so(gpu_image, model_dir):
    env = {"LLM_BYOC_DEVICE": "auto", "LLM_BYOC_NUM_THREADS": "1"}
    with running_container(gpu_image, (model_dir, "/opt/ml/model"), env, "llm-byoc-e2e-gpu-auto") as (name, url):
        response = requests.post(f"{url}/invocations", json={"inputs": "Hello", "parameters": {"max_new_tokens": 4}},
                                 timeout=120)
        assert response.status_code == 200 and isinstance(response.json()[0]["generated_text"], str)
        engine = requests.get(f"{url}/ping", timeout=10).json()["engine"]
        logs = docker("logs", name).stderr
    assert engine["name"] == "native" and "no CUDA device" in engine["reason"]  # auto: vLLM only on a GPU
    assert "LLM_BYOC_DEVICE=auto, but torch 2.13.0" in logs and "Running on the CPU instead" in logs
    assert "engine ready: /opt/ml/model (cpu, float32)" in logs
