#!/usr/bin/env bash
# The one command of the README: build the image, put the default model
# (SmolLM2-135M-Instruct) into ./models, run the container with it mounted at
# /opt/ml/model, wait for /ping and show a generation (plain, then streamed as text).
# The container keeps running afterwards: `docker stop -t 60 llm-byoc-local` stops it, and
# the next run of this script (or of serve_local.sh) removes the stopped container.
# Environment: IMAGE, PORT, NAME, MODEL_DIR, MAX_TOKENS, DOCKER_BUILD_ARGS.
set -euo pipefail
HERE=$(dirname "${BASH_SOURCE[0]}")
source "$HERE/common.sh"

echo "== building $IMAGE"
# shellcheck disable=SC2086
docker build ${DOCKER_BUILD_ARGS:-} -t "$IMAGE" "$REPO"

echo "== preparing the default model in $MODEL_DIR"
"$HERE/prepare_model.sh" "$MODEL_DIR"

echo "== starting $NAME on port $PORT"
if docker inspect "$NAME" >/dev/null 2>&1; then
  echo "replacing the container $NAME of an earlier run"
  docker rm -f "$NAME" >/dev/null
fi
require_free_port
docker run -d --name "$NAME" -p "$PORT:8080" -v "$(realpath "$MODEL_DIR"):/opt/ml/model:ro" "$IMAGE" serve >/dev/null
wait_for_ping 300 "$NAME"
echo "== /ping is 200"

echo "== POST /invocations (OpenAI chat)"
"$HERE/predict.sh" "What is the capital of France?" chat
echo "== POST /invocations (TGI, streamed: the text as it arrives; --raw shows the events)"
"$HERE/stream.sh" "Once upon a time" tgi
echo
echo "The container is still running on $URL: try local_test/predict.sh, local_test/stream.sh;"
echo "stop it with: docker stop -t 60 $NAME   (SIGTERM: in-flight requests finish, exit code 0)"
