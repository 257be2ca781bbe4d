#!/usr/bin/env bash
# Check the GPU image end to end on a machine with an NVIDIA GPU, its driver and the
# NVIDIA container toolkit (`docker run --gpus all` works). PyPI's torch 2.13.0 is built
# for CUDA 13.0: the host driver must be 580 or newer, the GPU Turing (sm_75) or newer.
#
#   local_test/check_gpu_image.sh          # build llm-byoc:gpu, then check it; ~10 minutes
#
#   1. the host's GPU and driver (nvidia-smi) and the image's size
#   2. local_test/gpu_probe.py in the image: torch's CUDA, the device, the dtype the server
#      picks by default (LLM_BYOC_DTYPE=auto: bfloat16, or float16 where the GPU has none), a matmul
#   3. W1 in process: engine_bench --device cuda (32 requests, 16 concurrent, ~30-token prompts,
#      64 new tokens, ignore_eos), the engine alone, in the default dtype
#   4. `serve` on our engine with SmolLM2-135M-Instruct mounted: /ping, the load lines (engine,
#      device, dtype), a generation, then W1 and a 64-client run through HTTP (python -m
#      llm_byoc.bench in the container, streamed)
#   5. the same on vLLM (LLM_BYOC_ENGINE=vllm) where the image has it (the GPU image does)
#
# Everything it prints, and the JSON of each step, lands in benchmarks/results/gpu_image_<UTC>/
# (RESULTS_DIR). Environment: IMAGE (llm-byoc:gpu), BUILD (1; 0 checks IMAGE as it is), MODEL_DIR,
# PORT (8080), NAME; W1_REQUESTS (32), W1_CONCURRENCY (16), W1_TOKENS (64) size the W1 runs,
# C64_CONCURRENCY (64) and C64_REQUESTS (128) the wider one (W1_TOKENS new tokens each).
# GPUS (all) is passed to `docker run --gpus`, DEVICE (cuda) to the engine; on a machine without a
# GPU it stops at once and says so. GPUS= DEVICE=cpu BUILD=0 IMAGE=llm-byoc:latest runs the same
# steps on the CPU with the CPU image, which shows the script itself works without a GPU.
set -euo pipefail
HERE=$(dirname "${BASH_SOURCE[0]}")
IMAGE=${IMAGE:-llm-byoc:gpu}
NAME=${NAME:-llm-byoc-gpu-check}
source "$HERE/common.sh"
GPUS=${GPUS-all}
DEVICE=${DEVICE:-cuda}
REQUESTS=${W1_REQUESTS:-32}
CONCURRENCY=${W1_CONCURRENCY:-16}
TOKENS=${W1_TOKENS:-64}
C64_CONCURRENCY=${C64_CONCURRENCY:-64}
C64_REQUESTS=${C64_REQUESTS:-128}
if [ -n "$GPUS" ] && ! command -v nvidia-smi >/dev/null && ! docker info 2>/dev/null | grep -qi 'runtimes:.*nvidia'; then
  die "no NVIDIA GPU here (no nvidia-smi, no nvidia runtime in docker info): this check needs one." \
    "To run its steps on the CPU instead: GPUS= DEVICE=cpu BUILD=0 IMAGE=llm-byoc:latest $SCRIPT"
fi
OUT=${RESULTS_DIR:-$REPO/benchmarks/results/gpu_image_$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT" && chmod 0777 "$OUT"  # the image may run as an unprivileged user
exec > >(tee "$OUT/check.log") 2>&1
gpu_args=(); [ -n "$GPUS" ] && gpu_args=(--gpus "$GPUS")
json_field() { sed -n "s/.*\"$1\": *\"\{0,1\}\([^\",}]*\).*/\1/p"; }  # a flat field of one JSON line (no python needed)

if [ "${BUILD:-1}" = 1 ]; then
  echo "== building $IMAGE (DEVICE=cuda)"
  start=$SECONDS
  docker build --build-arg DEVICE=cuda -t "$IMAGE" "$REPO"
  echo "build: $((SECONDS - start)) s"
fi

echo "== 1. host and image"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
else
  echo "(no nvidia-smi on this host)"
fi
echo "image $IMAGE: $(docker image inspect "$IMAGE" --format '{{.Size}}') bytes"

echo "== 2. torch and CUDA in the image"
docker run --rm -i "${gpu_args[@]}" --entrypoint python "$IMAGE" - <"$HERE/gpu_probe.py" | tail -1 | tee "$OUT/probe.json"
if [ "$DEVICE" = cuda ]; then
  [ "$(json_field cuda_available <"$OUT/probe.json")" = true ] || { echo "FAIL: torch sees no GPU in the container"; exit 1; }
  DTYPE=$(json_field default_dtype <"$OUT/probe.json")
else
  DTYPE=float32
fi
echo "default dtype on $DEVICE: $DTYPE"

echo "== preparing the default model in $MODEL_DIR"
"$HERE/prepare_model.sh" "$MODEL_DIR"
MODEL_DIR=$(realpath "$MODEL_DIR")

echo "== 3. W1, the engine in process (engine_bench --device $DEVICE --dtype $DTYPE)"
# the development benchmarks are not in the image: mounted from this checkout
docker run --rm "${gpu_args[@]}" -v "$MODEL_DIR:/opt/ml/model:ro" -v "$OUT:/out" \
  -v "$(realpath "$HERE/../benchmarks"):/opt/bench/benchmarks:ro" -w /opt/bench --entrypoint python "$IMAGE" \
  -m benchmarks.engine_bench --model /opt/ml/model --device "$DEVICE" --dtype "$DTYPE" --skip-baselines \
  --num-requests "$REQUESTS" --concurrency "$CONCURRENCY" --max-new-tokens "$TOKENS" --json /out/engine_bench.json

# 4 and 5: serve on each engine the image has (ours; vLLM where the image has it: the GPU image's
# LLM_BYOC_ENGINE=auto default on a GPU), each with a generation, W1 and a 64-client run through HTTP
serve_check() {  # serve_check STEP ENGINE
  local step=$1 engine=$2
  echo "== $step. serve on $DEVICE with LLM_BYOC_ENGINE=$engine (LLM_BYOC_DTYPE=auto), port $PORT"
  docker rm -f "$NAME" >/dev/null 2>&1 || true
  require_free_port
  docker run -d --name "$NAME" "${gpu_args[@]}" -p "127.0.0.1:$PORT:8080" -e "LLM_BYOC_DEVICE=$DEVICE" \
    -e "LLM_BYOC_ENGINE=$engine" -v "$MODEL_DIR:/opt/ml/model:ro" "$IMAGE" serve >/dev/null
  local start=$SECONDS
  wait_for_ping 900 "$NAME" || { docker logs "$NAME" >"$OUT/serve_$engine.log" 2>&1; echo "FAIL: /ping never said 200 ($OUT/serve_$engine.log)"; exit 1; }
  echo "ready in $((SECONDS - start)) s"
  docker logs "$NAME" 2>&1 | grep -E "engine: |engine ready|loaded /opt/ml/model|KV cache" || true
  curl -s "$URL/ping"; echo
  echo "-- a generation"
  "$HERE/predict.sh" "Write one sentence about the sea." chat
  for run in "w1 $CONCURRENCY $REQUESTS" "c64 $C64_CONCURRENCY $C64_REQUESTS"; do
    set -- $run
    echo "-- $1 through HTTP: $2 concurrent, $3 requests (TGI streams, ignore_eos)"
    docker exec "$NAME" python -m llm_byoc.bench --url http://127.0.0.1:8080 --concurrency "$2" \
      --num-requests "$3" --input-len 25 --output-len "$TOKENS" --warmup-requests 2 --no-png --no-progress \
      --out "/tmp/http_$1"
    docker cp "$NAME:/tmp/http_$1.json" "$OUT/http_${1}_$engine.json" >/dev/null
  done
  docker logs "$NAME" >"$OUT/serve_$engine.log" 2>&1
  docker rm -f "$NAME" >/dev/null
}
trap 'docker logs "$NAME" >"$OUT/serve_last.log" 2>&1 || true; docker rm -f "$NAME" >/dev/null 2>&1 || true' EXIT
serve_check 4 native
if ! docker run --rm --entrypoint python "$IMAGE" -c "import vllm" 2>/dev/null; then
  echo "== 5. (skipped: $IMAGE has no vLLM; the GPU image built with VLLM_VERSION has it)"
elif [ "$DEVICE" != cuda ]; then
  echo "== 5. (skipped: DEVICE=$DEVICE; the image's vLLM is its CUDA build, which needs a GPU)"
else
  serve_check 5 vllm
fi
echo "== done: $OUT"
