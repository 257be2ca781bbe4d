#!/bin/bash
# guidellm (a load generator written for OpenAI-compatible servers, unchanged) against the real
# `serve` on loopback, W1-like: 16 concurrent streams, ~32-token prompts, 64 output tokens
# (guidellm sends ignore_eos), 32 requests per route, for /v1/completions and /v1/chat/completions.
#
#   python -m venv /tmp/lg && /tmp/lg/bin/pip install guidellm   # its own venv: it would replace shared packages
#   bash benchmarks/guidellm_w1.sh [MODEL_DIR]                   # default: SmolLM2-135M-Instruct
#
# Writes benchmarks/results/guidellm_w1_{completions,chatcompletions}.json (guidellm's own report).
set -u
cd "$(dirname "$0")/.." && export PYTHONPATH=$PWD/code
GUIDELLM=${GUIDELLM:-/tmp/lg/bin/guidellm}
MODEL=${1:-$(python -m llm_byoc.models.default_model | tail -1)}
PORT=$(python -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
SOCK=$(mktemp -d)/engine.sock
LLM_BYOC_MODEL=$MODEL SAGEMAKER_BIND_TO_PORT=$PORT LLM_BYOC_ENGINE_SOCKET=$SOCK LLM_BYOC_NUM_THREADS=2 \
  LLM_BYOC_LOG_LEVEL=warning SAGEMAKER_MODEL_SERVER_TIMEOUT=600 python container/serve serve > /tmp/guidellm_serve.log 2>&1 &
SERVE=$!
trap 'kill -TERM $SERVE; wait $SERVE' EXIT
for _ in $(seq 1 240); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 1; done
NAME=$(curl -s "http://127.0.0.1:$PORT/v1/models" | python -c "import json, sys; print(json.load(sys.stdin)['data'][0]['id'])")
for FORMAT in /v1/completions /v1/chat/completions; do
  TAG=$(echo "$FORMAT" | tr -d / | sed 's/v1//')
  HF_HUB_OFFLINE=1 timeout 600 "$GUIDELLM" run \
    --backend "kind=openai_http,target=http://127.0.0.1:$PORT,model=$NAME,request_format=$FORMAT" \
    --profile kind=concurrent,streams=16 \
    --data kind=synthetic_text,prompt_tokens=32,output_tokens=64 \
    --tokenizer "kind=huggingface_auto,model=$MODEL" \
    --constraint kind=max_requests,count=32 --constraint kind=max_duration,seconds=420 \
    --output "kind=json,path=benchmarks/results/guidellm_w1_$TAG.json" --output kind=console \
    --disable-console-interactive
done
