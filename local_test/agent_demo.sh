#!/usr/bin/env bash
# The knowledge agent offline, end to end: a multi-model server with SmolLM2 and all-MiniLM-L6-v2,
# the shipped documents (local_test/agent_docs: Markdown, text and a PDF) ingested, one question
# answered with RAG and with CAG.
#   local_test/agent_demo.sh ["QUESTION"]
# Builds the demo repository (models/mme) if it is missing, then starts local_test/serve_mme.sh in
# the background (Docker, or LOCAL=1 on this machine) and stops it at the end. Needs the agent
# extra: pip install -e '.[agent]'. Environment: as serve_mme.sh (IMAGE, PORT, LOCAL, ...).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
QUESTION=${1:-How long do in-flight requests get to finish after SIGTERM?}
REPO_DIR=$REPO/models/mme
INDEX=$(mktemp -d)/agent-index
LLM=smollm2-135m-instruct
[ -d "$REPO_DIR/$LLM" ] || "$REPO/local_test/build_model_repository.sh" "$REPO_DIR"
"$REPO/local_test/serve_mme.sh" "$REPO_DIR" >"$INDEX.serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; [ "${LOCAL:-0}" = 1 ] || docker stop "$NAME" >/dev/null 2>&1 || true' EXIT
wait_for_ping 300
agent() { echo "+ python -m llm_byoc.agent $*" >&2; python3 -m llm_byoc.agent "$@" --local "$URL" --log-level warning; }
agent ingest "$REPO/local_test/agent_docs" --index "$INDEX"
echo "== RAG"
agent ask "$QUESTION" --index "$INDEX" --llm-model "$LLM"
echo "== CAG"
agent ask "$QUESTION" --cag "$REPO/local_test/agent_docs" --llm-model "$LLM"
