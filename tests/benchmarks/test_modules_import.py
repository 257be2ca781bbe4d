"""Every benchmark module imports: the load generator in the package, and the development
benchmarks in ``benchmarks/`` (scripts that CI does not run end to end)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import benchmarks
import llm_byoc.bench

BENCH_MODULES = sorted(m.name for m in pkgutil.iter_modules(llm_byoc.bench.__path__, "llm_byoc.bench.")
                       if not m.name.endswith("__main__"))  # __main__ runs the load generator
DEV_MODULES = sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__, "benchmarks."))


@pytest.mark.parametrize("name", BENCH_MODULES + DEV_MODULES)
def test_the_module_imports(name):
    importlib.import_module(name)


def test_the_development_benchmarks_are_out_of_the_served_package():
    assert "llm_byoc.bench.engine_bench" not in BENCH_MODULES and "benchmarks.engine_bench" in DEV_MODULES
    assert set(m.rsplit(".", 1)[1] for m in BENCH_MODULES) == {
        "baselines", "compare", "loadgen", "report", "runner", "stats", "targets", "workload"}


def test_the_server_process_reads_its_own_memory():
    import os

    from benchmarks.serve_process import footprint, process_tree

    assert os.getpid() in process_tree(os.getpid()) and footprint(os.getpid()).rss > 0
