"""Every benchmark module imports (they are scripts that CI does not run end to end)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import llm_byoc.bench

BENCH_MODULES = sorted(m.name for m in pkgutil.iter_modules(llm_byoc.bench.__path__, "llm_byoc.bench.")
                       if not m.name.endswith("__main__"))  # __main__ runs the load generator


@pytest.mark.parametrize("name", BENCH_MODULES)
def test_the_module_imports(name):
    importlib.import_module(name)


def test_the_server_process_reads_its_own_memory():
    import os

    from llm_byoc.bench.serve_process import footprint, process_tree

    assert os.getpid() in process_tree(os.getpid()) and footprint(os.getpid()).rss > 0
