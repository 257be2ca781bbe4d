#!/bin/bash
# Issue 28: one streaming client's ITL and W1's tok/s through the real `serve`, an earlier tree against this
# one, alternating. Both servers stay up (an idle server costs next to nothing); each round runs every
# measurement on A, then on B, and the next round starts with B, so that load on a shared machine falls
# on both alike.
#
#   bash benchmarks/issue28_serve_ab.sh OLD_CODE_DIR [ROUNDS] [THREADS_A] [THREADS_B] [NEW_CODE_DIR]
#   e.g. bash benchmarks/issue28_serve_ab.sh /work/main/code 3 2 2
#
# Per round and tree: c=1 on /invocations (TGI stream, a logprob per token), c=1 on /v1/completions,
# then W1 (16 concurrent, 32 requests, 64 new tokens, TGI route). C1_REQUESTS and C1_TOKENS (default 8
# and 64) shorten the c=1 runs on a busy machine. Writes bench JSON under
# $OUT (default /tmp/issue28_ab); summarise with benchmarks/issue28_summary.py.
set -u
cd "$(dirname "$0")/.."
OLD=${1:?OLD_CODE_DIR}
ROUNDS=${2:-3}
THREADS_A=${3:-2}
THREADS_B=${4:-2}
NEW=${5:-$PWD/code}
OUT=${OUT:-/tmp/issue28_ab}
C1_REQUESTS=${C1_REQUESTS:-8}  # measured c=1 requests per route (one more is sent first, unmeasured)
C1_TOKENS=${C1_TOKENS:-64}
mkdir -p "$OUT"
MODEL=$(PYTHONPATH=$PWD/code python -m llm_byoc.models.default_model 2>/dev/null | tail -1)
port() { python -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"; }
start() {  # CODE_DIR THREADS -> prints the port; the server's pid goes to $OUT/pids
  local code=$1 threads=$2 p sock
  p=$(port); sock=$(mktemp -d)/engine.sock
  PYTHONPATH=$code LLM_BYOC_MODEL=$MODEL SAGEMAKER_BIND_TO_PORT=$p LLM_BYOC_ENGINE_SOCKET=$sock \
    LLM_BYOC_NUM_THREADS=$threads LLM_BYOC_LOG_LEVEL=warning SAGEMAKER_MODEL_SERVER_TIMEOUT=600 \
    python "$code/../container/serve" serve > "$OUT/serve_$p.log" 2>&1 &
  echo $! >> "$OUT/pids"
  echo "$p"
}
: > "$OUT/pids"
PORT_A=$(start "$OLD" "$THREADS_A")
PORT_B=$(start "$NEW" "$THREADS_B")
trap 'for p in $(cat $OUT/pids); do kill -TERM $p; done; wait' EXIT
for p in $PORT_A $PORT_B; do
  for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$p/ping" >/dev/null && break; sleep 1; done
done
echo "A (old $OLD, $THREADS_A threads) on $PORT_A, B ($NEW, $THREADS_B threads) on $PORT_B"
bench() {  # NAME PORT TAG ARGS...
  local name=$1 p=$2 tag=$3; shift 3
  PYTHONPATH=$PWD/code python -m llm_byoc.bench --url "http://127.0.0.1:$p" --no-png --no-progress \
    --seed 28 --out "$OUT/${tag}_${name}" "$@" > /dev/null 2>&1 || echo "failed: $tag $name"
}
measure() {  # NAME PORT ROUND
  local name=$1 p=$2 r=$3
  bench "$name" "$p" "r${r}_c1_tgi" --api tgi --concurrency 1 --input-len 32 --output-len "$C1_TOKENS" \
    --num-requests "$C1_REQUESTS" --warmup-requests 1
  bench "$name" "$p" "r${r}_c1_openai" --api openai --path /v1/completions --concurrency 1 --input-len 32 \
    --output-len "$C1_TOKENS" --num-requests "$C1_REQUESTS" --warmup-requests 1
  bench "$name" "$p" "r${r}_w1" --api tgi --concurrency 16 --input-len 32 --output-len 64 --num-requests 32
}
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then measure A "$PORT_A" "$r"; measure B "$PORT_B" "$r"
  else measure B "$PORT_B" "$r"; measure A "$PORT_A" "$r"; fi
  echo "round $r done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
done
