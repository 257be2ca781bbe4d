# Shared settings of the local_test scripts (sourced, not run).
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
IMAGE=${IMAGE:-llm-byoc:latest}
NAME=${NAME:-llm-byoc-local}
PORT=${PORT:-8080}
URL=${URL:-http://localhost:$PORT}
MODEL_DIR=${MODEL_DIR:-$REPO/models/SmolLM2-135M-Instruct}  # /models/ is git-ignored

wait_for_ping() {  # wait_for_ping [seconds]
  local deadline=$((SECONDS + ${1:-180}))
  until [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/ping")" = 200 ]; do
    if [ $SECONDS -ge $deadline ]; then echo "no 200 from $URL/ping in time" >&2; return 1; fi
    sleep 1
  done
}

json_string() {  # json_string TEXT -> a JSON string literal (no python needed)
  local s=${1//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\t'/\\t}
  s=${s//$'\r'/\\r}
  printf '"%s"' "$s"
}
