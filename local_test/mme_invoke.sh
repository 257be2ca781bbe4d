#!/usr/bin/env bash
# Walk through the multi-model API against a running server (local_test/serve_mme.sh):
# load the demo models, list them, invoke each kind, unload one.
#   local_test/mme_invoke.sh [image.jpg|image.png]
# Environment: URL (default http://localhost:8080), MODELS_ROOT (the root as the server
# sees it: /opt/ml/models in Docker, the repository folder with LOCAL=1).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ROOT=${MODELS_ROOT:-/opt/ml/models}
IMAGE_FILE=${1:-}
call() { echo "+ $*" >&2; curl -sS -w '\n  -> HTTP %{http_code}\n' "$@"; }
wait_for_ping 60
for name in mobilenet-v2 all-minilm-l6-v2; do
  call -X POST "$URL/models" -H 'Content-Type: application/json' \
    -d "{\"model_name\": \"$name\", \"url\": \"$ROOT/$name\"}"
done
call "$URL/models?max_results=10"
if [ -z "$IMAGE_FILE" ]; then
  IMAGE_FILE=$(mktemp --suffix=.png)
  python3 -c 'import sys; from llm_byoc.multimodel.demo_repository import drawn_test_image as d; d().save(sys.argv[1])' "$IMAGE_FILE"
fi
case "$IMAGE_FILE" in *.png) CT=image/png ;; *) CT=image/jpeg ;; esac
call -X POST "$URL/models/mobilenet-v2/invoke?top_k=3" -H "Content-Type: $CT" --data-binary "@$IMAGE_FILE"
call -X POST "$URL/invocations" -H 'X-Amzn-SageMaker-Target-Model: all-minilm-l6-v2' \
  -H 'Content-Type: application/json' -d '{"inputs": ["hello world"]}' | cut -c1-200
# Never registered: loads lazily from the repository on its first invoke.
call -X POST "$URL/invocations" -H 'X-Amzn-SageMaker-Target-Model: smollm2-135m-instruct' \
  -H 'Content-Type: application/json' -d '{"inputs": "The capital of France is", "parameters": {"max_new_tokens": 12}}'
call -X POST "$URL/models" -H 'Content-Type: application/json' -d '{"model_name": "escape", "url": "/etc"}'
call -X DELETE "$URL/models/all-minilm-l6-v2"
call "$URL/models"
