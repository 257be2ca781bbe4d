#!/usr/bin/env bash
# One generation:  local_test/predict.sh ["prompt"] [tgi|chat|completion]
# Environment: URL (default http://localhost:8080), MAX_TOKENS (default 40).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PROMPT=${1:-What is the capital of France?}
STYLE=${2:-chat}
N=${MAX_TOKENS:-40}
PROMPT_JSON=$(json_string "$PROMPT")
case "$STYLE" in
  tgi) BODY="{\"inputs\": $PROMPT_JSON, \"parameters\": {\"max_new_tokens\": $N}}" ;;
  chat) BODY="{\"messages\": [{\"role\": \"user\", \"content\": $PROMPT_JSON}], \"max_tokens\": $N, \"temperature\": 0}" ;;
  completion) BODY="{\"prompt\": $PROMPT_JSON, \"max_tokens\": $N, \"temperature\": 0}" ;;
  *) echo "style must be tgi, chat or completion" >&2; exit 2 ;;
esac
require_server
curl -sS --fail-with-body "$URL/invocations" -H 'Content-Type: application/json' -d "$BODY"
echo
