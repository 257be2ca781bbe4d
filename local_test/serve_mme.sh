#!/usr/bin/env bash
# Serve a model repository in multi-model mode (SAGEMAKER_MULTI_MODEL=true), in the foreground:
#   local_test/serve_mme.sh [REPO_DIR] [docker run options...]
# REPO_DIR defaults to models/mme (MME_DIR; build it with local_test/build_model_repository.sh);
# it is mounted read-only at /opt/ml/models. LOCAL=1 runs the server on this
# machine instead of in Docker (python -m llm_byoc.api.serve).
# A stopped container of the same name (an earlier run's) is removed first.
# Environment: IMAGE, PORT, NAME (llm-byoc-mme), MEMORY_BUDGET (bytes, 2GiB, or a RAM fraction like 0.6),
# BACKEND (native, or triton: an image built with --build-arg TRITON=pytriton, or LOCAL=1
# with nvidia-pytriton and tritonclient installed).
set -euo pipefail
NAME=${NAME:-llm-byoc-mme}
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
REPO_DIR=$MME_DIR
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then REPO_DIR=$1; shift; fi
REPO_DIR=$(realpath -m "$REPO_DIR")
[ -d "$REPO_DIR" ] || die "no model repository at $REPO_DIR (run local_test/build_model_repository.sh)"
BUDGET=${MEMORY_BUDGET:-3GiB}
BACKEND=${BACKEND:-native}
if [ "${LOCAL:-0}" = 1 ]; then
  require_free_port
  export SAGEMAKER_MULTI_MODEL=true LLM_BYOC_MODEL_ROOT="$REPO_DIR" LLM_BYOC_MEMORY_BUDGET="$BUDGET" SAGEMAKER_BIND_TO_PORT="$PORT" \
    LLM_BYOC_MULTI_MODEL_BACKEND="$BACKEND"
  exec python3 -m llm_byoc.api.serve
fi
require_image
free_container_name
require_free_port
exec docker run --rm --name "$NAME" -p "$PORT:8080" \
  -e SAGEMAKER_MULTI_MODEL=true -e LLM_BYOC_MEMORY_BUDGET="$BUDGET" -e LLM_BYOC_MULTI_MODEL_BACKEND="$BACKEND" \
  -v "$REPO_DIR:/opt/ml/models:ro" "$@" "$IMAGE" serve
