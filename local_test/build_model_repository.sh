#!/usr/bin/env bash
# Build the offline demo model repository for multi-model mode:
#   local_test/build_model_repository.sh [DEST] [--no-llm]
# DEST defaults to models/mme (git-ignored). Three folders, each with an
# llm_byoc_model.json (task, framework, options):
#   smollm2-135m-instruct  causal LM          (SmolLM2-135M-Instruct, safetensors)
#   all-minilm-l6-v2       text embedding     (sentence-transformers folder)
#   mobilenet-v2           image classification (ONNX + 1000 ImageNet labels)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
DEST=${1:-$REPO/models/mme}
[ $# -gt 0 ] && shift
python3 -m llm_byoc.multimodel.demo_repository "$DEST" "$@"
