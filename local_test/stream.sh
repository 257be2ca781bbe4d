#!/usr/bin/env bash
# A streamed generation, printed event by event as the tokens are made:
#   local_test/stream.sh ["prompt"] [tgi|chat|completion]
# Environment: URL (default http://localhost:8080), MAX_TOKENS (default 40).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PROMPT=${1:-Write a haiku about the sea.}
STYLE=${2:-tgi}
N=${MAX_TOKENS:-40}
PROMPT_JSON=$(json_string "$PROMPT")
case "$STYLE" in
  tgi) BODY="{\"inputs\": $PROMPT_JSON, \"parameters\": {\"max_new_tokens\": $N}, \"stream\": true}" ;;
  chat) BODY="{\"messages\": [{\"role\": \"user\", \"content\": $PROMPT_JSON}], \"max_tokens\": $N, \"stream\": true}" ;;
  completion) BODY="{\"prompt\": $PROMPT_JSON, \"max_tokens\": $N, \"stream\": true}" ;;
  *) echo "style must be tgi, chat or completion" >&2; exit 2 ;;
esac
curl -sS -N --fail-with-body "$URL/invocations" -H 'Content-Type: application/json' -d "$BODY"
