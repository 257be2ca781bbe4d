"""Start methods: 'auto' forks from the zygote except where CUDA is used."""

from __future__ import annotations

import pytest
from llm_byoc.process import launcher


def test_resolve():
    assert launcher.resolve("auto") == "forkserver"
    assert launcher.resolve("auto", device="cuda") == "spawn"
    assert launcher.resolve("spawn") == "spawn"
    assert launcher.resolve("forkserver", device="cuda") == "forkserver"  # the operator's choice
    with pytest.raises(ValueError):
        launcher.resolve("fork")


def test_the_forkserver_context_preloads_the_zygote():
    from multiprocessing import forkserver

    context = launcher.get_context("forkserver")
    assert context.get_start_method() == "forkserver"
    assert launcher.ZYGOTE_MODULE in forkserver._forkserver._preload_modules


def test_the_caller_names_what_the_zygote_preloads_after_itself():
    from multiprocessing import forkserver

    launcher.get_context("forkserver", preload=("llm_byoc.multimodel.handlers.image",))
    assert forkserver._forkserver._preload_modules == [launcher.ZYGOTE_MODULE, "llm_byoc.multimodel.handlers.image"]
