# llm-byoc: a SageMaker bring-your-own-container image that serves one LLM
# (continuous batching, token streaming) or many models (SAGEMAKER_MULTI_MODEL=true).
#
#   CPU (default):  docker build -t llm-byoc .
#   Lean CPU torch: docker build --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu -t llm-byoc .
#   GPU (ml.g5):    docker build --build-arg BASE_IMAGE=<a CUDA 12 image with Python 3.11 and pip> \
#                     --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 -t llm-byoc:gpu .
#
# The model is not baked in: SageMaker (or `docker run -v DIR:/opt/ml/model`)
# puts it in /opt/ml/model.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ARG TORCH_VERSION=2.13.0
# Empty: the default package index. Set it to pick a torch build (CPU-only, a CUDA version).
ARG TORCH_INDEX_URL=

LABEL com.amazonaws.sagemaker.capabilities.accept-bind-to-port=true \
      com.amazonaws.sagemaker.capabilities.multi-models=true \
      org.opencontainers.image.title="llm-byoc" \
      org.opencontainers.image.description="SageMaker-compatible LLM serving container"

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    LLM_BYOC_MODEL=/opt/ml/model

# torch first, on its own layer: the largest dependency, and the one a GPU build swaps.
RUN pip install --no-cache-dir ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "torch==${TORCH_VERSION}"

# The package alone (no dev/test extras), from a throwaway copy of the source.
COPY pyproject.toml /tmp/llm-byoc/pyproject.toml
COPY code /tmp/llm-byoc/code
RUN pip install --no-cache-dir /tmp/llm-byoc \
 && rm -rf /tmp/llm-byoc /root/.cache

COPY container/serve /usr/local/bin/serve
# `serve` runs as an unprivileged user: the engine socket's key then guards
# against other users, and nothing a model or a request could reach runs as
# root. /opt/ml/model (SageMaker's model.tar.gz, or a `docker run -v` mount)
# only needs to be readable by it; its home holds the caches.
RUN chmod 0755 /usr/local/bin/serve \
 && useradd --system --uid 10001 --user-group --create-home --home-dir /home/llmbyoc --shell /usr/sbin/nologin llmbyoc \
 && mkdir -p /opt/ml/model /opt/ml/models
USER 10001:10001
ENV HOME=/home/llmbyoc

EXPOSE 8080
# Exec form: `serve` is PID 1 and receives SIGTERM from `docker stop` / SageMaker.
# `docker run IMAGE serve` (what SageMaker runs) and `docker run IMAGE` both serve.
ENTRYPOINT ["serve"]
