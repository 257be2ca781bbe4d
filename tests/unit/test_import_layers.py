"""The package's import graph, read from the source with ``ast``: no cycle between files, no
import from a lower layer up to a higher one, and no import of our own modules inside a
function unless it is listed below with its reason.

Every ``import`` counts, at the top of a module or inside a function or a class, relative
ones resolved; ``from pkg import name`` counts as an import of ``pkg.name`` when that is a
module, else of ``pkg``. Importing ``a.b.c`` also runs ``a/__init__.py`` and ``a/b/__init__.py``:
those count for cycles too.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import llm_byoc

PACKAGE = "llm_byoc"
ROOT = Path(llm_byoc.__file__).resolve().parent

# The layers, lowest first. A module may import from its own layer and from those below,
# never from one above. A module belongs to the entry that names it or its longest package.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # Plain Python, no model and no server: the errors, the names of the container contract,
    # the settings read from the environment, the machine's CPUs and memory, logging.
    ("foundations", ("llm_byoc", "errors", "contract", "wire", "cpu", "memory", "config", "config_aliases", "logging_setup")),
    # The typed messages that cross a process boundary (and the adapters' plain data and
    # folder checks they carry), and the Prometheus metrics of what they report.
    ("messages", ("adapters", "protocol", "gateway_metrics", "tgi_metrics", "metrics")),
    # The endpoint client stands on the contract alone: it runs where the server's
    # packages (Flask, torch) are not installed, so nothing of the server is below it.
    ("client", ("client",)),
    # Child processes and their handles; model files and tokenizers; grammars.
    ("process, models, grammar", ("process", "models", "grammar")),
    ("worker", ("worker",)),  # the model worker process: the model step on tensors
    ("engine", ("engine",)),  # the engine seam; scheduler, KV blocks, requests; its model executor
    # Request and response shapes (TGI, OpenAI, SSE), below both the HTTP API and the
    # multi-model causal-LM handler.
    ("schemas", ("schemas",)),
    ("multimodel", ("multimodel",)),  # the MME model cache, its processes and backends (triton/)
    ("api", ("api",)),  # the HTTP front end: Flask app, gunicorn worker, serve
    # Tools over all of it.
    ("tools", ("agent", "deploy", "bench", "cli")),
]

# Imports of our own modules inside a function: (importer, imported) -> why it cannot be at the top.
DEFERRED: dict[tuple[str, str], str] = {
    ("llm_byoc.deploy.cli", "llm_byoc.deploy.commands"): "boto3 only after parsing: --help stays fast",
    ("llm_byoc.deploy.cli", "llm_byoc.deploy.component_commands"): "boto3 only after parsing: --help stays fast",
    ("llm_byoc.engine.model_executor", "llm_byoc.worker.main"): "the worker's torch is imported in its child only",
    ("llm_byoc.worker.main", "llm_byoc.worker.runner"): "torch after the child has set its threads up",
    ("llm_byoc.api.multimodel_routes", "llm_byoc.multimodel.triton.factory"):
        "the Triton backend (numpy, the handlers) only when it is configured: every HTTP worker imports the routes",
    ("llm_byoc.multimodel.model_entry", "llm_byoc.multimodel.handlers.by_kind"):
        "the handlers' numpy and LLM engine in the model process only, not in the server that starts it",
    ("llm_byoc.engine.llm_engine", "llm_byoc.models.fast_tokenizer"): "tokenizers only once a tokenizer is needed",
    ("llm_byoc.grammar.compiler", "llm_byoc.models.fast_tokenizer"): "tokenizers only once a grammar is compiled",
    ("llm_byoc.models.source", "llm_byoc.models.gguf_cache"): "the optional gguf package, for a .gguf model only",
    ("llm_byoc.multimodel.demo_repository", "llm_byoc.multimodel.mobilenet"): "torch, for the image demo only",
    # The load generator: torch (and transformers) only for the runs that compare with baselines.
    ("llm_byoc.bench.loadgen", "llm_byoc.bench.compare"): "torch and transformers only when --baselines asks for them",
    ("llm_byoc.bench.compare", "llm_byoc.bench.baselines"): "torch and transformers only when baselines are run",
    ("llm_byoc.bench.baselines", "llm_byoc.worker.linear"): "torch kernels only when a linear backend is asked for",
    ("llm_byoc.bench.targets", "llm_byoc.client"): "boto3 only for the SageMaker endpoint target",
    # LLM_BYOC_ENGINE=vllm: the loaders' torch in the engine process only when vLLM (which imports it anyway) is the engine
    ("llm_byoc.engine.vllm_core", "llm_byoc.models.loader"): "torch only when vLLM is the engine",
    ("llm_byoc.engine.vllm_core", "llm_byoc.models.footprint"): "loaded with the rest of vLLM's start",
    ("llm_byoc.engine.vllm_core", "llm_byoc.worker.kv_sizing"): "torch only when vLLM is the engine",
    ("llm_byoc.engine.vllm_core", "llm_byoc.worker.loading"): "torch only when vLLM is the engine",
}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int
    in_function: bool


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def _resolve(module: str | None, level: int, importer: str) -> str:
    if level == 0:
        return module or ""
    is_package = modules()[importer].name == "__init__.py"
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _ours(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


def _imports_in(importer: str) -> list[Import]:
    tree = ast.parse(modules()[importer].read_text(), filename=str(modules()[importer]))
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend(Import(importer, alias.name, child.lineno, in_function)
                             for alias in child.names if _ours(alias.name))
            elif isinstance(child, ast.ImportFrom):
                target = _resolve(child.module, child.level, importer)
                if _ours(target):
                    for alias in child.names:
                        full = f"{target}.{alias.name}"
                        found.append(Import(importer, full if full in modules() else target, child.lineno, in_function))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(tree, False)
    return found


@cache
def imports() -> list[Import]:
    return [found for importer in modules() for found in _imports_in(importer)]


def layer_of(module: str) -> int:
    best: tuple[int, int] | None = None  # (length of the matching name, layer)
    for index, (_, members) in enumerate(LAYERS):
        for member in members:
            name = member if member == PACKAGE else f"{PACKAGE}.{member}"
            within = module == name or (name != PACKAGE and module.startswith(name + "."))
            if within and (best is None or len(name) > best[0]):
                best = (len(name), index)
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best[1]


def _runs(imported: str, importer: str) -> set[str]:
    """What importing ``imported`` executes that ``importer`` has not run already: the module
    and the packages above it."""
    parts = imported.split(".")
    own = {".".join(importer.split(".")[:n]) for n in range(1, importer.count(".") + 2)}
    return {".".join(parts[:n]) for n in range(2, len(parts) + 1)} - own - {importer}


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {name: set() for name in modules()}
    for found in imports():
        assert found.imported in modules(), f"{found.importer}:{found.line} imports {found.imported}, not a module"
        edges[found.importer] |= {name for name in _runs(found.imported, found.importer) if name in modules()}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a -> ... -> a) from each strongly connected group of modules (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(edges[node]):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = set()
            while True:
                other = stack.pop()
                on_stack.discard(other)
                group.add(other)
                if other == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return [_a_cycle(group, edges) for group in groups]


def _a_cycle(group: set[str], edges: dict[str, set[str]]) -> list[str]:
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:  # breadth first: the shortest way back to start
        following = []
        for node in frontier:
            for other in sorted(edges[node] & group):
                if other == start:
                    return paths[node] + [start]
                if other not in paths:
                    paths[other] = paths[node] + [other]
                    following.append(other)
        frontier = following
    raise AssertionError(f"no cycle through {start}")


def test_every_layer_names_modules_that_exist():
    for name, members in LAYERS:
        for member in members:
            full = member if member == PACKAGE else f"{PACKAGE}.{member}"
            assert full in modules(), f"layer {name!r} names {member}, which is no module of {PACKAGE}"


def test_no_import_cycle_between_files():
    found = cycles(graph())
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in found)


def test_no_import_from_a_lower_layer_up_to_a_higher_one():
    upward = [
        f"{found.importer}:{found.line} ({LAYERS[layer_of(found.importer)][0]}) imports "
        f"{found.imported} ({LAYERS[layer_of(found.imported)][0]})"
        for found in imports()
        if layer_of(found.imported) > layer_of(found.importer)
    ]
    assert not upward, "imports up the layers:\n" + "\n".join(upward)


def test_our_modules_are_imported_inside_a_function_only_for_a_listed_reason():
    deferred = {(found.importer, found.imported): found for found in imports() if found.in_function}
    unlisted = [f"{found.importer}:{found.line} imports {found.imported} inside a function"
                for key, found in sorted(deferred.items()) if key not in DEFERRED]
    assert not unlisted, "imports inside functions (move them to the top, or list them in DEFERRED):\n" + "\n".join(unlisted)
    stale = sorted(set(DEFERRED) - set(deferred))
    assert not stale, f"DEFERRED lists imports that are no longer inside a function: {stale}"


def test_the_checks_see_what_they_check():
    """The graph machinery on a known shape: a cycle through a package's __init__ is found."""
    edges = {"p": {"p.a"}, "p.a": {"q"}, "q": {"p"}, "r": {"q"}}
    assert cycles(edges) == [["p", "p.a", "q", "p"]]
    assert _runs("llm_byoc.engine.core", "llm_byoc.api.app") == {"llm_byoc.engine", "llm_byoc.engine.core"}
    assert _runs("llm_byoc.api.errors", "llm_byoc.api.app") == {"llm_byoc.api.errors"}
    assert layer_of("llm_byoc.multimodel.triton.server") > layer_of("llm_byoc.schemas.openai")
    assert layer_of("llm_byoc") == layer_of("llm_byoc.errors") == 0
