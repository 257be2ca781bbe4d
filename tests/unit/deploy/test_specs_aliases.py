"""deploy checks TGI's, LMI's and vLLM's settings as the container will read them."""

from __future__ import annotations

import pytest

from llm_byoc.deploy.errors import DeployError
from llm_byoc.deploy.specs import validate_environment


def test_other_images_settings_are_checked_before_anything_is_created():
    validate_environment({"HF_MODEL_ID": "org/m", "SM_NUM_GPUS": "2", "OPTION_DTYPE": "bf16"}, multi_model=False)
    with pytest.raises(DeployError, match="SM_NUM_GPUS='4' and LLM_BYOC_TENSOR_PARALLEL_SIZE='2'"):
        validate_environment({"SM_NUM_GPUS": "4", "LLM_BYOC_TENSOR_PARALLEL_SIZE": "2"}, multi_model=False)
    with pytest.raises(DeployError, match="OPTION_DTYPE='int4'"):
        validate_environment({"OPTION_DTYPE": "int4"}, multi_model=False)
    with pytest.raises(DeployError, match="LLM_BYOC_MAX_NUM_SEQS"):
        validate_environment({"OPTION_MAX_ROLLING_BATCH_SIZE": "-3"}, multi_model=False)
