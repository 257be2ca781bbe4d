#!/usr/bin/env bash
# Run the image on CPU with a model folder mounted at /opt/ml/model, in the
# foreground (Ctrl-C stops it):  local_test/serve_local.sh [MODEL_DIR] [docker run options...]
# A stopped container of the same name (build_and_run.sh's, after `docker stop`) is removed first.
# Environment: IMAGE, PORT (host port, default 8080), NAME.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then MODEL_DIR=$1; shift; fi
MODEL_DIR=$(realpath "$MODEL_DIR")
[ -f "$MODEL_DIR/config.json" ] || [ -n "$(ls "$MODEL_DIR"/*.gguf 2>/dev/null)" ] || {
  echo "no model in $MODEL_DIR (run local_test/prepare_model.sh first)" >&2; exit 1; }
require_image
free_container_name
require_free_port
exec docker run --rm --name "$NAME" -p "$PORT:8080" -v "$MODEL_DIR:/opt/ml/model:ro" "$@" "$IMAGE" serve
