#!/usr/bin/env bash
# Walk through the multi-model API against a running server (local_test/serve_mme.sh):
# load the demo models, list them, invoke each kind, unload one. Fails at the first answer
# with an unexpected status; a rerun against the same server works (409: already loaded).
#   local_test/mme_invoke.sh [image.jpg|image.png]
# Environment: URL (default http://localhost:8080), MODELS_ROOT (the root as the server
# sees it: /opt/ml/models in Docker, the repository folder with LOCAL=1), IMAGE (draws the
# test image where this machine's Python has no llm_byoc).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROOT=${MODELS_ROOT:-/opt/ml/models}
IMAGE_FILE=${1:-}

call() {  # call EXPECTED CURL_ARGS...: one request, its answer (cut at 300 characters) and status
  local expected=$1 answer code
  shift
  echo "+ curl $*" >&2
  answer=$(curl -sS -w '\n%{http_code}' "$@")
  code=${answer##*$'\n'}
  answer=${answer%$'\n'*}
  answer=${answer%$'\n'}
  printf '%s\n  -> HTTP %s\n' "${answer:0:300}" "$code"
  case "|$expected|" in *"|$code|"*) ;; *) die "expected HTTP $expected from: curl $*" ;; esac
}

if [ "$(curl -s -o /dev/null -m 5 -w '%{http_code}' "$URL/ping")" != 200 ]; then
  echo "waiting up to 60 s for $URL/ping (local_test/serve_mme.sh serves it)" >&2
  wait_for_ping 60
fi
curl -s "$URL/ping" | grep -q '"budget_bytes"' ||
  die "the server on $URL is not in multi-model mode: start local_test/serve_mme.sh (or point URL or PORT at it)"

for name in mobilenet-v2 all-minilm-l6-v2; do
  call '200|409' -X POST "$URL/models" -H 'Content-Type: application/json' \
    -d "{\"model_name\": \"$name\", \"url\": \"$ROOT/$name\"}"
done
call 200 "$URL/models?max_results=10"
if [ -z "$IMAGE_FILE" ]; then
  IMAGE_FILE=$(mktemp --suffix=.png)
  DRAW='import sys; from llm_byoc.multimodel.demo_repository import drawn_test_image as d; d().save(sys.stdout.buffer, "PNG")'
  if host_python_has llm_byoc.multimodel.demo_repository PIL; then
    host_python -c "$DRAW" >"$IMAGE_FILE"
  else  # the image's Python draws it (Pillow is in the image)
    docker run --rm --entrypoint python "$IMAGE" -c "$DRAW" >"$IMAGE_FILE"
  fi
fi
case "$IMAGE_FILE" in *.png) CT=image/png ;; *) CT=image/jpeg ;; esac
call 200 -X POST "$URL/models/mobilenet-v2/invoke?top_k=3" -H "Content-Type: $CT" --data-binary "@$IMAGE_FILE"
call 200 -X POST "$URL/invocations" -H 'X-Amzn-SageMaker-Target-Model: all-minilm-l6-v2' \
  -H 'Content-Type: application/json' -d '{"inputs": ["hello world"]}'
# Never registered: loads lazily from the repository on its first invoke.
call 200 -X POST "$URL/invocations" -H 'X-Amzn-SageMaker-Target-Model: smollm2-135m-instruct' \
  -H 'Content-Type: application/json' -d '{"inputs": "The capital of France is", "parameters": {"max_new_tokens": 12}}'
# Refused: a url outside the model root.
call 400 -X POST "$URL/models" -H 'Content-Type: application/json' -d '{"model_name": "escape", "url": "/etc"}'
call 200 -X DELETE "$URL/models/all-minilm-l6-v2"
call 200 "$URL/models"
