# llm-byoc: a SageMaker bring-your-own-container image that serves one LLM
# (continuous batching, token streaming) or many models (SAGEMAKER_MULTI_MODEL=true).
#
#   CPU (default):  docker build -t llm-byoc .
#   Lean CPU torch: docker build --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu -t llm-byoc .
#   GPU (ml.g5):    docker build --build-arg DEVICE=cuda -t llm-byoc:gpu .
#     (with vLLM, VLLM_VERSION; VLLM_VERSION= builds it without: our engine only)
#     python:3.11-slim + PyPI's torch wheel, which is the CUDA build on Linux x86_64 and brings
#     the CUDA runtime libraries (nvidia-* wheels); the driver comes from the host at run time
#     (NVIDIA container toolkit: docker run --gpus all, Kubernetes nvidia.com/gpu).
#
# The model is not baked in: SageMaker (or `docker run -v DIR:/opt/ml/model`)
# puts it in /opt/ml/model.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ARG TORCH_VERSION=2.13.0
# Empty: the default package index. Set it to pick a torch build (CPU-only, a CUDA version).
ARG TORCH_INDEX_URL=
# cuda: the GPU image. torch comes from TORCH_INDEX_URL (default PyPI) alone, never from a local
# wheel folder (PIP_FIND_LINKS: a 2.13.0+cpu wheel there would win over PyPI's 2.13.0), the build
# fails if that torch has no CUDA, and the image defaults to LLM_BYOC_DEVICE=cuda, so a container
# that sees no GPU fails with the reason instead of serving on the CPU.
ARG DEVICE=auto

LABEL com.amazonaws.sagemaker.capabilities.accept-bind-to-port=true \
      com.amazonaws.sagemaker.capabilities.multi-models=true \
      org.opencontainers.image.title="llm-byoc" \
      org.opencontainers.image.description="SageMaker-compatible LLM serving container"

# No setting that TGI's, LMI's or vLLM's names are read as (config_aliases.py) is set here: the
# image's value would collide with a user's HF_MODEL_ID, OPTION_MODEL_ID, SM_VLLM_* as if they had set
# both (tests/unit/test_dockerfile_env.py). The model's default, /opt/ml/model, is config.py's.
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# torch first, on its own layer: the largest dependency, and the one a GPU build swaps.
RUN if [ "$DEVICE" = cuda ]; then \
      PIP_FIND_LINKS= pip install --no-cache-dir --index-url "${TORCH_INDEX_URL:-https://pypi.org/simple}" "torch==${TORCH_VERSION}" \
      && python -c "import sys, torch; sys.exit(None if torch.version.cuda else f'DEVICE=cuda, but torch {torch.__version__} has no CUDA: set TORCH_INDEX_URL to a CUDA wheel index')"; \
    else \
      pip install --no-cache-dir ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "torch==${TORCH_VERSION}"; \
    fi \
 && if [ "$DEVICE" != cuda ]; then \
      TORCH_DIR=$(python -c "import os, torch; print(os.path.dirname(torch.__file__))") \
      && rm -rf "$TORCH_DIR/test" "$TORCH_DIR/include" \
                "$TORCH_DIR"/lib/libjitbackend_test.so "$TORCH_DIR"/lib/libtorchbind_test.so \
                "$TORCH_DIR"/lib/libbackend_with_compiler.so \
      && find "$TORCH_DIR/bin" -mindepth 1 -maxdepth 1 ! -name torch_shm_manager -exec rm -rf {} + \
      && find "$TORCH_DIR" -name '*.pyi' -delete \
      && python -c "import torch; torch.ones(2) @ torch.ones(2)"; \
    fi
# ^ CPU image: what serving never loads: C++ test binaries (torch/test, torch/bin but
#   torch_shm_manager, which `import torch` looks for), C++ headers for building extensions
#   (torch/include), test libraries and type stubs (*.pyi): ~180 MB of the CPU wheel; the last line proves torch still
#   imports and computes. The GPU image keeps them (torch.compile's code generation needs the headers).

# GPU image: vLLM (LLM_BYOC_ENGINE=auto picks it where a GPU is visible), on its own layer. Its
# CUDA wheel pins the same torch as ours (2.13.0, CUDA 13.0), so the torch layer above stays; it pins
# transformers below our pin (<5.20), so in this image vLLM's transformers is installed and the package
# goes in beside it with its other requirements. VLLM_VERSION= (empty) leaves vLLM out: the image to
# build with a CUDA 12 TORCH_INDEX_URL, which vLLM's kernels (built for CUDA 13.0's torch) do not fit.
ARG VLLM_VERSION=0.32.0
RUN if [ "$DEVICE" = cuda ] && [ -n "$VLLM_VERSION" ]; then \
      PIP_FIND_LINKS= pip install --no-cache-dir "vllm==${VLLM_VERSION}" "torch==${TORCH_VERSION}" \
      && python -c "import torch, vllm; print('vllm', vllm.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda)" \
      && rm -rf /root/.cache; \
    fi

# The package alone (no dev/test extras), from a throwaway copy of the source. Its one compiled part, the
# CPU kernels (setup.py: decode attention, int8 rows), need a C compiler and Python's headers for the install only
# (a Debian python3 has no headers: libpython3.X-dev): they come and go in this layer, and the build
# fails if the kernel did not compile. Every package the compiler brought is purged again (the list
# before and after), and apt's downloads with them: the layer is the size it was without the kernel.
COPY pyproject.toml setup.py /tmp/llm-byoc/
COPY code /tmp/llm-byoc/code
RUN dpkg-query -W -f '${Package}\n' | sort > /tmp/packages.before \
 && build_deps="gcc libc6-dev" \
 && { [ -f "$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ] \
      || build_deps="$build_deps libpython$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')-dev"; } \
 && apt-get update && apt-get install -y --no-install-recommends $build_deps \
 && if python -c "import vllm" 2>/dev/null; then \
      python -c "import tomllib; print(*(d for d in tomllib.load(open('/tmp/llm-byoc/pyproject.toml', 'rb'))['project']['dependencies'] if not d.startswith(('torch', 'transformers'))), sep='\n')" > /tmp/requirements.txt \
      && PIP_FIND_LINKS= pip install --no-cache-dir -r /tmp/requirements.txt "torch==${TORCH_VERSION}" \
      && pip install --no-cache-dir --no-deps /tmp/llm-byoc; \
    else \
      pip install --no-cache-dir /tmp/llm-byoc; \
    fi \
 && apt-get purge -y $(dpkg-query -W -f '${Package}\n' | sort | comm -13 /tmp/packages.before -) \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /tmp/packages.before \
 && python -c "import sys; from llm_byoc.worker import cpu_kernels as c; sys.exit(c.unavailable())" \
 && rm -rf /tmp/llm-byoc /tmp/requirements.txt /root/.cache

# Multi-model on Triton (LLM_BYOC_MULTI_MODEL_BACKEND=triton), off by default:
#   --build-arg TRITON=pytriton  tritonclient + the CPU-capable tritonserver inside the nvidia-pytriton
#                                wheel (its Python API, and that API's numpy<2 pin, are not used: --no-deps).
#                                Its Python backend stub embeds libpython3.X.so.1.0: where the Python has
#                                none (Debian's python3), the libpython3.X package is installed with it.
#   --build-arg TRITON=client    tritonclient only: a base image that has NVIDIA's tritonserver on PATH
#                                (BASE_IMAGE=nvcr.io/nvidia/tritonserver:<version>-py3, the GPU build)
ARG TRITON=none
RUN if [ "$TRITON" != none ]; then pip install --no-cache-dir "tritonclient[grpc]>=2.50" "onnx>=1.16"; fi \
 && if [ "$TRITON" = pytriton ]; then \
      pip install --no-cache-dir --no-deps "nvidia-pytriton==0.7.0" \
      && v=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])') \
      && { python3 -c "import ctypes.util, sys; sys.exit(not ctypes.util.find_library('python$v'))" \
           || { apt-get update && apt-get install -y --no-install-recommends "libpython$v" \
                && rm -rf /var/lib/apt/lists/*; }; }; \
    fi
# NVIDIA_DRIVER_CAPABILITIES is read by the NVIDIA container toolkit only (CUDA + nvidia-smi;
# unset it would mount only "utility"); ignored where no GPU is attached.
ENV LLM_BYOC_DEVICE=${DEVICE} \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility

COPY container/serve /usr/local/bin/serve
# The image starts as root, and `serve` gives root up before it starts anything:
# it becomes the unprivileged llmbyoc (uid/gid 10001) when that user can read
# every file it must serve, so the engine, its model worker and gunicorn run
# unprivileged. SageMaker extracts model.tar.gz as root keeping its modes, and
# some checkpoint writers leave model.safetensors 0600: such a model is served
# too, as root, with one log line naming the file and how to pack it instead
# (llm_byoc/process/privileges.py). With `docker run --user 10001` or
# Kubernetes' runAsUser everything runs as that user from the start, and the
# files must be readable by it. Its home holds the caches.
RUN chmod 0755 /usr/local/bin/serve \
 && useradd --system --uid 10001 --user-group --create-home --home-dir /home/llmbyoc --shell /usr/sbin/nologin llmbyoc \
 && mkdir -p /opt/ml/model /opt/ml/models
ENV HOME=/home/llmbyoc

EXPOSE 8080
# Exec form: `serve` is PID 1 and receives SIGTERM from `docker stop` / SageMaker.
# `docker run IMAGE serve` (what SageMaker runs) and `docker run IMAGE` both serve.
ENTRYPOINT ["serve"]
