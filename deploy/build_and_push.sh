#!/usr/bin/env bash
# Build the llm-byoc image, push it to ECR (creating the repository if missing),
# and print the image URI for `python -m llm_byoc.deploy create --image ...`.
#
#   deploy/build_and_push.sh                      # CPU image, tag "cpu"
#   deploy/build_and_push.sh --gpu                # CUDA image for ml.g5 / ml.g6, tag "gpu"
#                                                 # (CUDA 13.0: the host's NVIDIA driver must be >= 580)
#   deploy/build_and_push.sh --gpu --dry-run      # print the commands, run none
#
# Options:
#   --gpu                  the GPU image: DEVICE=cuda, python:3.11-slim + PyPI's CUDA torch wheel
#   --repository NAME      ECR repository (default: llm-byoc)
#   --tag TAG              image tag (default: cpu or gpu)
#   --region REGION        AWS region (default: AWS_REGION, AWS_DEFAULT_REGION, then the aws cli config)
#   --base-image IMAGE     override BASE_IMAGE (default: the Dockerfile's, python:3.11-slim)
#   --torch-version VER    override TORCH_VERSION (default: the Dockerfile's)
#   --torch-index-url URL  override TORCH_INDEX_URL (CPU default: PyTorch's cpu wheel index; GPU default:
#                          PyPI, whose Linux wheel is the CUDA 13.0 build; .../whl/cu126 for older drivers)
#   --no-push              build and tag only
#   --dry-run              print every command instead of running it
#
# Needs docker, and the aws cli v2 or (fallback) python with llm_byoc installed.
# SageMaker runs linux/amd64, so the build targets that platform on any host.
# Commands and progress go to stderr; stdout is the image URI alone:
#   IMAGE=$(deploy/build_and_push.sh --gpu)
set -euo pipefail

CPU_TORCH_INDEX_DEFAULT="https://download.pytorch.org/whl/cpu"      # no CUDA libraries: a much smaller image

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
gpu=0 repository="llm-byoc" tag="" region="" base_image="" torch_version="" torch_index="" push=1 dry_run=0

usage() { sed -n '2,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { echo "error: $*" >&2; exit 1; }
need_value() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value"; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --gpu) gpu=1 ;;
    --repository) need_value "$@"; repository="$2"; shift ;;
    --tag) need_value "$@"; tag="$2"; shift ;;
    --region) need_value "$@"; region="$2"; shift ;;
    --base-image) need_value "$@"; base_image="$2"; shift ;;
    --torch-version) need_value "$@"; torch_version="$2"; shift ;;
    --torch-index-url) need_value "$@"; torch_index="$2"; shift ;;
    --no-push) push=0 ;;
    --dry-run) dry_run=1 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
  shift
done

[[ "$repository" =~ ^[a-z0-9]+([._/-][a-z0-9]+)*$ ]] || die "invalid ECR repository name: $repository"
if [[ $gpu -eq 1 ]]; then
  tag="${tag:-gpu}"  # the Dockerfile's DEVICE=cuda defaults: PyPI's CUDA torch, checked at build
else
  tag="${tag:-cpu}" torch_index="${torch_index:-$CPU_TORCH_INDEX_DEFAULT}"
fi
[[ "$tag" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "invalid image tag: $tag"

# Print a command (to stderr, quoted as the shell needs it); run it unless --dry-run.
# Its output goes to stderr too, so stdout carries only the final image URI.
run() {
  { printf '+'; printf ' %q' "$@"; printf '\n'; } >&2
  [[ $dry_run -eq 1 ]] || "$@" >&2
}

have_aws_cli() { command -v aws >/dev/null 2>&1; }

region="${region:-${AWS_REGION:-${AWS_DEFAULT_REGION:-}}}"
if [[ -z "$region" && $dry_run -eq 0 ]] && have_aws_cli; then
  region="$(aws configure get region || true)"
fi
[[ -n "$region" ]] || die "no AWS region: pass --region or set AWS_REGION"

if [[ $dry_run -eq 1 ]]; then
  account="ACCOUNT_ID"  # not looked up: a dry run makes no AWS call
elif have_aws_cli; then
  account="$(aws sts get-caller-identity --query Account --output text --region "$region")" \
    || die "cannot read the AWS account (credentials?): aws sts get-caller-identity failed"
else
  account=""  # the python fallback below prints the full URI
fi

local_image="llm-byoc:${tag}"
build_args=()
[[ $gpu -eq 1 ]] && build_args+=(--build-arg "DEVICE=cuda")
[[ -n "$torch_index" ]] && build_args+=(--build-arg "TORCH_INDEX_URL=${torch_index}")
[[ -n "$base_image" ]] && build_args+=(--build-arg "BASE_IMAGE=${base_image}")
[[ -n "$torch_version" ]] && build_args+=(--build-arg "TORCH_VERSION=${torch_version}")

echo "== build ${local_image} ($( [[ $gpu -eq 1 ]] && echo GPU || echo CPU ))" >&2
[[ $dry_run -eq 1 ]] || command -v docker >/dev/null 2>&1 || die "docker is not installed or not on PATH"
run docker build --platform linux/amd64 "${build_args[@]}" -t "$local_image" "$REPO_ROOT"

if [[ $push -eq 0 ]]; then echo "$local_image"; exit 0; fi

echo "== ECR repository ${repository} in ${region}" >&2
if have_aws_cli || [[ $dry_run -eq 1 ]]; then
  registry="${account}.dkr.ecr.${region}.amazonaws.com"
  if [[ $dry_run -eq 1 ]]; then
    run aws ecr describe-repositories --repository-names "$repository" --region "$region"
    echo "# only when it does not exist yet:" >&2
    run aws ecr create-repository --repository-name "$repository" --image-scanning-configuration scanOnPush=true --region "$region"
  elif ! aws ecr describe-repositories --repository-names "$repository" --region "$region" >/dev/null 2>&1; then
    run aws ecr create-repository --repository-name "$repository" \
      --image-scanning-configuration scanOnPush=true --region "$region" >/dev/null
  fi
  echo "+ aws ecr get-login-password --region $region | docker login --username AWS --password-stdin $registry" >&2
  if [[ $dry_run -eq 0 ]]; then
    aws ecr get-login-password --region "$region" | docker login --username AWS --password-stdin "$registry" >&2
  fi
else
  echo "(no aws cli: using python -m llm_byoc.deploy)" >&2
  command -v python >/dev/null 2>&1 || die "neither the aws cli nor python is available"
  uri="$(python -m llm_byoc.deploy ecr --repository "$repository" --tag "$tag" --region "$region")"
  registry="${uri%%/*}"
  echo "+ python -m llm_byoc.deploy ecr --login-password --region $region | docker login --username AWS --password-stdin $registry" >&2
  python -m llm_byoc.deploy ecr --login-password --region "$region" 2>/dev/null \
    | docker login --username AWS --password-stdin "$registry" >&2
fi

image_uri="${registry}/${repository}:${tag}"
echo "== push ${image_uri}" >&2
run docker tag "$local_image" "$image_uri"
run docker push "$image_uri"
echo "$image_uri"
