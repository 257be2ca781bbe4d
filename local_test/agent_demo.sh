#!/usr/bin/env bash
# The knowledge agent offline, end to end: a multi-model server with SmolLM2 and all-MiniLM-L6-v2,
# the shipped documents (local_test/agent_docs: Markdown, text and a PDF) ingested, one question
# answered with RAG and with CAG.
#   local_test/agent_demo.sh ["QUESTION"]
# Builds the demo repository (MME_DIR, models/mme) if it is missing, then starts
# local_test/serve_mme.sh in the background (Docker, or LOCAL=1 on this machine) and stops it at
# the end. The agent runs on this machine: it needs the agent extra, pip install -e '.[agent]'.
# Environment: as serve_mme.sh (IMAGE, LOCAL, MEMORY_BUDGET, ...), but its own server has its own
# NAME (llm-byoc-agent-demo) and PORT (the first free one from 8081), so it runs beside one on 8080;
# MAX_TOKENS caps each answer (--answer-tokens); SAGEMAKER_MODEL_SERVER_TIMEOUT is 300 s, not 60: on a
# laptop's CPU the CAG answer (the documents whole, then 160 tokens) can take over a minute.
set -euo pipefail
NAME=${NAME:-llm-byoc-agent-demo}
PORT_GIVEN=${PORT:-}
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
if [ -z "$PORT_GIVEN" ]; then
  PORT=8081
  while port_in_use "$PORT"; do PORT=$((PORT + 1)); done
  URL=http://localhost:$PORT
fi
export IMAGE NAME PORT MME_DIR SAGEMAKER_MODEL_SERVER_TIMEOUT=${SAGEMAKER_MODEL_SERVER_TIMEOUT:-300}
QUESTION=${1:-How long do in-flight requests get to finish after SIGTERM?}
LLM=smollm2-135m-instruct
host_python_has llm_byoc.agent.cli pypdf jsonschema ||
  die "the agent runs on this machine's Python: pip install -e '.[agent]' (llm_byoc with pypdf and jsonschema)"

[ "${LOCAL:-0}" = 1 ] || { require_image; free_container_name; }
require_free_port  # here, not only in serve_mme.sh: another server's /ping on the port would pass for ours
[ -d "$MME_DIR/$LLM" ] || "$REPO/local_test/build_model_repository.sh" "$MME_DIR"
WORK=$(mktemp -d)
LOG=$WORK/serve.log
echo "== serving $MME_DIR on $URL (local_test/serve_mme.sh; its log: $LOG)"
"$REPO/local_test/serve_mme.sh" "$MME_DIR" -e SAGEMAKER_MODEL_SERVER_TIMEOUT >"$LOG" 2>&1 &
SERVER=$!
stop_server() {  # only a server this script started: serve_mme.sh may have refused to start one
  local status=$?
  if kill -0 "$SERVER" 2>/dev/null; then
    if [ "${LOCAL:-0}" = 1 ]; then kill "$SERVER"; else docker stop -t 60 "$NAME" >/dev/null 2>&1 || true; fi
  fi
  wait "$SERVER" 2>/dev/null || true
  [ $status = 0 ] || echo "(the server's log: $LOG)" >&2
}
trap stop_server EXIT
wait_for_ping 300 "$SERVER" "$LOG"

agent() {
  echo "+ python -m llm_byoc.agent $*" >&2
  host_python -m llm_byoc.agent "$@" --local "$URL" --log-level warning
}
ANSWER=()
[ -z "${MAX_TOKENS:-}" ] || ANSWER=(--answer-tokens "$MAX_TOKENS")
agent ingest "$REPO/local_test/agent_docs" --index "$WORK/index"
echo "== RAG"
agent ask "$QUESTION" --index "$WORK/index" --llm-model "$LLM" "${ANSWER[@]}"
echo "== CAG"
agent ask "$QUESTION" --cag "$REPO/local_test/agent_docs" --llm-model "$LLM" "${ANSWER[@]}"
