#!/usr/bin/env bash
# A streamed generation, its text printed as the tokens arrive, then TTFT and tokens/s:
#   local_test/stream.sh [--raw] ["prompt"] [tgi|chat|completion]
# --raw prints the server-sent events themselves, as they come (curl alone).
# Environment: URL (default http://localhost:8080), MAX_TOKENS (default 40), NAME (the server's container).
set -euo pipefail
HERE=$(dirname "${BASH_SOURCE[0]}")
source "$HERE/common.sh"
RAW=0
if [ "${1:-}" = --raw ]; then RAW=1; shift; fi
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
require_server
raw() { exec curl -sS -N --fail-with-body "$URL/invocations" -H 'Content-Type: application/json' -d "$BODY"; }
[ "$RAW" = 0 ] || raw

# The text comes from local_test/stream_text.py, which reads the stream with the package's own
# client, so there is one SSE parser for every schema. It runs in this machine's Python when
# llm_byoc imports there; else, so that Docker and curl suffice, inside the server's container
# (`docker exec`: the image's Python, the server at 127.0.0.1:8080 in the container's own network,
# and no container start inside the timing); failing both, the raw events.
if host_python_has llm_byoc.client; then
  host_python "$HERE/stream_text.py" "$URL" "$BODY"
  exit
fi
if docker port "$NAME" 8080 2>/dev/null | grep -q ":$PORT\$"; then
  exec docker exec -i "$NAME" python - http://127.0.0.1:8080 "$BODY" <"$HERE/stream_text.py"
fi
echo "(no Python with llm_byoc here and no container $NAME on port $PORT: the raw events)" >&2
raw
