"""The image's own environment (the Dockerfile's ENV lines) against the settings users bring from other images.

A variable the image sets is in every container's environment, where ``serve`` cannot tell it from one the
user set: were it ``LLM_BYOC_MODEL``, a user's ``HF_MODEL_ID`` would be a second, different value for the
same setting, and ``serve`` would refuse to start. So the image sets none of the settings that
config_aliases reads other images' names as, and none of those names either.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from llm_byoc.config import ENV_SM_VLLM_PREFIX
from llm_byoc.config_aliases import ALIASES, IGNORED, VLLM_ARG_SETTINGS

DOCKERFILE = Path(__file__).resolve().parents[2] / "Dockerfile"


def instructions(text: str) -> list[tuple[str, str]]:
    """(instruction, its arguments) of each instruction, continuation lines joined and comments dropped, as
    Docker reads them."""
    out, pending = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue  # a comment inside a continued instruction is dropped too
        pending += " " + (stripped[:-1] if stripped.endswith("\\") else stripped)
        if not stripped.endswith("\\"):
            keyword, _, args = pending.strip().partition(" ")
            out.append((keyword.upper(), args.strip()))
            pending = ""
    return out


def env_names(text: str) -> dict[str, str]:
    """Every variable an ENV instruction sets, and its value (``ENV K=V K2=V2`` and the older ``ENV K V``)."""
    names = {}
    for keyword, args in instructions(text):
        if keyword != "ENV":
            continue
        words = shlex.split(args)
        if words and "=" not in words[0]:
            names[words[0]] = " ".join(words[1:])
            continue
        for word in words:
            key, _, value = word.partition("=")
            names[key] = value
    return names


def clashes(names) -> dict[str, str]:
    """Each of ``names`` that is a setting another image's name is read as (-> that name), or such a name itself."""
    readers = {}
    for alias in ALIASES:
        readers.setdefault(alias.ours, alias.name)
        readers[alias.name] = alias.name
    for arg, (ours, _) in VLLM_ARG_SETTINGS.items():
        readers.setdefault(ours, f"{ENV_SM_VLLM_PREFIX}{arg.upper()}")
    readers.update({name: name for name in IGNORED})
    return {name: readers.get(name, name) for name in names
            if name in readers or name.startswith(ENV_SM_VLLM_PREFIX)}


def test_the_parser_reads_both_forms_continuations_and_comments():
    text = "FROM x\nENV A=1 \\\n    # a comment\n    B=\"two words\"\nenv C 3\nRUN echo ENV D=4\n"
    assert env_names(text) == {"A": "1", "B": "two words", "C": "3"}


def test_the_image_reads_the_dockerfile_it_is_built_from():
    names = env_names(DOCKERFILE.read_text())
    assert {"PYTHONUNBUFFERED", "LLM_BYOC_DEVICE", "HOME"} <= set(names)


def test_the_image_sets_no_setting_another_images_name_is_read_as():
    found = clashes(env_names(DOCKERFILE.read_text()))
    assert not found, (f"the Dockerfile sets {sorted(found)}: a user's {sorted(set(found.values()))} would collide "
                       f"with the image's value as if they had set both; leave the default to config.py")


@pytest.mark.parametrize("line, name", [
    ("ENV LLM_BYOC_MODEL=/opt/ml/model", "LLM_BYOC_MODEL"),
    ("ENV A=1 \\\n  LLM_BYOC_MAX_MODEL_LEN=2048", "LLM_BYOC_MAX_MODEL_LEN"),
    ("ENV LLM_BYOC_DTYPE bfloat16", "LLM_BYOC_DTYPE"),
    ("ENV HF_MODEL_ID=org/name", "HF_MODEL_ID"),
    ("ENV SM_VLLM_ENFORCE_EAGER=true", "SM_VLLM_ENFORCE_EAGER"),
])
def test_each_kind_of_clash_is_found(line, name):
    assert name in clashes(env_names(f"FROM x\n{line}\n"))


def test_settings_no_other_image_names_are_no_clash():
    assert clashes(["LLM_BYOC_DEVICE", "HOME", "NVIDIA_DRIVER_CAPABILITIES", "LLM_BYOC_NUM_THREADS"]) == {}
