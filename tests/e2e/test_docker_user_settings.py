"""The image started the way users of other images start theirs: TGI's settings (``HF_MODEL_ID`` as a hub id
and as a path, ``MAX_INPUT_TOKENS``, ``MAX_TOTAL_TOKENS``, ``SM_NUM_GPUS``), LMI's (``OPTION_MODEL_ID`` as an
S3 prefix, ``OPTION_TENSOR_PARALLEL_DEGREE``, ``OPTION_MAX_MODEL_LEN``) and those of vLLM's SageMaker image
(``SM_VLLM_MODEL``, ``SM_VLLM_*``). Each start reaches /ping 200 and serves the model under the name that
user expects, with the limits they set; two settings of the user's own that disagree fail the start, naming
both. SageMaker's own start (the model at /opt/ml/model, no settings) is test_docker.py's ``container``.

These catch what starting ``serve`` outside the image cannot: a variable the image sets itself is in the
environment of every container, where ``serve`` cannot tell it from the user's. The hub is the loopback
stand-in (tests/fakes/fake_hub.py, ``HF_ENDPOINT``) serving the tiny Llama under SmolLM2's id, S3 is moto's
server on loopback; the containers share this machine's network (``--network host``) to reach them.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests
from fakes.fake_hub import FakeHub
from fixtures.s3_stand_in import s3_with_model

from docker_helpers import docker, make_readable, run_to_exit, running_on_host_network

pytestmark = [pytest.mark.docker, pytest.mark.slow]

HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
OTHER = "/opt/ml/other"  # not SageMaker's /opt/ml/model: the model is where the user's setting says
S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                  "AWS_DEFAULT_REGION": "us-east-1"}


@dataclass(frozen=True)
class UserStart:
    """One user's ``docker run -e ...``: ``{hub}`` and ``{s3}`` in a value are the stand-ins' URLs."""

    env: dict[str, str]
    model_id: str  # what /info's model_id says: the hub id, the S3 prefix's or the folder's last part
    max_total_tokens: int
    max_input_tokens: int
    logged: list[str] = field(default_factory=list)  # lines serve logs on the way
    mounted: bool = False  # the model folder mounted at OTHER


STARTS = {
    "tgi-hub-id": UserStart(
        {"HF_MODEL_ID": HUB_ID, "HF_ENDPOINT": "{hub}", "SM_NUM_GPUS": "1", "MAX_INPUT_TOKENS": "150",
         "MAX_TOTAL_TOKENS": "200"},
        HUB_ID, 200, 150,
        [f"HF_MODEL_ID read as LLM_BYOC_MODEL={HUB_ID}", "SM_NUM_GPUS read as LLM_BYOC_TENSOR_PARALLEL_SIZE=1",
         f"downloading {HUB_ID} from the Hugging Face hub"]),
    "tgi-path": UserStart(
        {"HF_MODEL_ID": OTHER, "MAX_INPUT_LENGTH": "100", "MAX_TOTAL_TOKENS": "128"},
        "other", 128, 100, [f"HF_MODEL_ID read as LLM_BYOC_MODEL={OTHER}"], mounted=True),
    "lmi-s3-prefix": UserStart(
        {"OPTION_MODEL_ID": "s3://models/tiny/", "AWS_ENDPOINT_URL_S3": "{s3}", **S3_CREDENTIALS,
         "OPTION_TENSOR_PARALLEL_DEGREE": "max", "OPTION_MAX_MODEL_LEN": "128", "OPTION_DTYPE": "fp32",
         "OPTION_ROLLING_BATCH": "auto"},
        "tiny", 128, 127,
        ["OPTION_MODEL_ID read as LLM_BYOC_MODEL=s3://models/tiny/",
         "OPTION_TENSOR_PARALLEL_DEGREE read as LLM_BYOC_TENSOR_PARALLEL_SIZE=0",
         "OPTION_ROLLING_BATCH is ignored", "downloading s3://models/tiny/"]),
    "vllm-sm-vllm": UserStart(
        {"SM_VLLM_MODEL": HUB_ID, "HF_ENDPOINT": "{hub}", "SM_VLLM_MAX_MODEL_LEN": "96", "SM_VLLM_DTYPE": "float32",
         "SM_VLLM_TENSOR_PARALLEL_SIZE": "1", "SM_VLLM_ENFORCE_EAGER": "true"},
        HUB_ID, 96, 95,
        [f"SM_VLLM_MODEL read as LLM_BYOC_MODEL={HUB_ID}", "SM_VLLM_MAX_MODEL_LEN read as LLM_BYOC_MAX_MODEL_LEN=96",
         "SM_VLLM_ENFORCE_EAGER read into LLM_BYOC_VLLM_ENGINE_ARGS"]),
}


@pytest.fixture(scope="module")
def model_dir(tiny_llama_dir, tmp_path_factory) -> Path:
    """The tiny Llama, readable by the container's unprivileged user."""
    return make_readable(Path(shutil.copytree(tiny_llama_dir, tmp_path_factory.mktemp("user-settings") / "tiny")))


@pytest.fixture(scope="module")
def hub(model_dir):
    stand_in = FakeHub(HUB_ID, model_dir)
    yield stand_in
    stand_in.stop()


@pytest.fixture(scope="module")
def s3_url(model_dir):
    with s3_with_model(model_dir) as url:
        yield url


@pytest.mark.parametrize("who", sorted(STARTS))
def test_the_image_starts_as_each_user_starts_theirs(who, image, model_dir, request):
    start = STARTS[who]
    urls = {"hub": request.getfixturevalue("hub").url if "{hub}" in start.env.values() else "",
            "s3": request.getfixturevalue("s3_url") if "{s3}" in start.env.values() else ""}
    env = {"LLM_BYOC_NUM_THREADS": "1", **{key: value.format(**urls) for key, value in start.env.items()}}
    mounts = [(model_dir, OTHER)] if start.mounted else []
    with running_on_host_network(image, env, mounts, f"llm-byoc-e2e-{who}") as (name, url):
        info = requests.get(f"{url}/info", timeout=10).json()
        assert (info["model_id"], info["max_total_tokens"], info["max_input_tokens"]) == (
            start.model_id, start.max_total_tokens, start.max_input_tokens)
        out = requests.post(f"{url}/generate", json={"inputs": "Hello", "parameters": {"max_new_tokens": 3}},
                            timeout=60)
        assert out.status_code == 200 and out.json()["generated_text"], out.text
        chat = requests.post(f"{url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                                 "max_tokens": 3}, timeout=60)
        assert chat.status_code == 200 and chat.json()["model"] == start.model_id, chat.text
        log = docker("logs", name).stderr
    for line in start.logged:
        assert line in log, f"{line!r} not in the log:\n{log[-3000:]}"


def test_two_settings_of_the_users_own_that_disagree_fail_the_start_naming_both(image, model_dir):
    """The one conflict there is: two values the user set (the image sets none of them)."""
    result = run_to_exit(image, {"HF_MODEL_ID": OTHER, "LLM_BYOC_MODEL": "/opt/ml/model"}, [(model_dir, OTHER)])
    assert result.returncode == 2, result.stderr[-3000:]
    assert (f"serve: HF_MODEL_ID={OTHER!r} and LLM_BYOC_MODEL='/opt/ml/model' both set LLM_BYOC_MODEL to "
            "different values: set one of them") in result.stderr

