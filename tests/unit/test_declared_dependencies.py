"""Every package the tests and the development benchmarks import is declared in pyproject.toml (the package's
own dependencies or its ``test`` extra), so a new virtual environment made from the repository's files alone
(``.ci/run``) has it: a package left on a developer's machine by an earlier install cannot pass for declared."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Imported through a declared package whose API exposes it (flask's werkzeug, boto3's botocore, the sagemaker
# SDK's namespace that sagemaker-core fills)
THROUGH = {"werkzeug": "flask", "botocore": "boto3", "sagemaker": "sagemaker-core"}


def _declared() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["test"]
    return {_normal(re.match(r"[A-Za-z0-9_.\-]+", spec).group(0)) for spec in wanted}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported_top_modules() -> set[str]:
    found = set()
    for path in [*(REPO / "tests").rglob("*.py"), *(REPO / "benchmarks").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found


def _local_modules() -> set[str]:
    """The tests' and benchmarks' own modules (put on sys.path by conftest.py and pytest's rootdir)."""
    names = {path.stem for root in ("tests", "benchmarks") for path in (REPO / root).rglob("*.py")}
    return names | {path.name for root in ("tests", "benchmarks") for path in (REPO / root).rglob("*") if
                    path.is_dir()} | {"benchmarks", "tests", "llm_byoc"}


def test_every_package_the_tests_import_is_declared():
    distributions = importlib.metadata.packages_distributions()
    declared = _declared()
    missing = {}
    for module in sorted(_imported_top_modules() - set(sys.stdlib_module_names) - _local_modules()):
        names = {_normal(d) for d in distributions.get(module, [])} or {_normal(module)}
        through = THROUGH.get(module)
        if not names & declared and not (through and _normal(through) in declared):
            missing[module] = sorted(names)
    assert not missing, f"imported by tests/ or benchmarks/ but not declared in pyproject.toml: {missing}"
