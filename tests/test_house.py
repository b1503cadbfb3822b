"""The house: a pinned public API, an import graph without circles, and a wheel that works."""

from __future__ import annotations

import ast
import inspect
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import types
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fresh_python import modules_loaded

import llmlat

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "llmlat"

# What a user needs, and nothing else: a change here is a change of the public API.
PUBLIC = [
    "Attempt",
    "FitResult",
    "NeedsData",
    "Prices",
    "Record",
    "RetryPolicy",
    "SimConfig",
    "Simulator",
    "SweepConfig",
    "SweepResult",
    "Sweeper",
    "Target",
    "__version__",
    "asweep",
    "compare",
    "compare_fits",
    "compare_runs",
    "datasets",
    "fit",
    "plot",
    "queueing",
    "read",
    "request_costs",
    "schema",
    "sweep",
    "verify_plan",
    "policy_lab",
]


def test_all_is_pinned() -> None:
    assert sorted(llmlat.__all__) == sorted(PUBLIC)
    assert len(set(llmlat.__all__)) == len(llmlat.__all__)


@pytest.mark.parametrize("name", PUBLIC)
def test_public_name_resolves_and_is_documented(name: str) -> None:
    value = getattr(llmlat, name)
    if name == "__version__":
        assert re.fullmatch(r"\d+\.\d+\.\d+\S*", value)
        return
    doc = inspect.getdoc(value)
    assert doc and len(doc.split()) >= 3, f"llmlat.{name} has no docstring"
    # the documentation is its own, not one inherited from a base class
    assert value.__doc__, f"llmlat.{name} documents nothing of its own"
    if not isinstance(value, types.ModuleType):
        assert value.__module__.startswith("llmlat.")


def test_star_import_gives_exactly_the_public_names() -> None:
    namespace: dict[str, object] = {}
    exec("from llmlat import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(PUBLIC)


# --- the import graph -------------------------------------------------------------------------


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(body: list[ast.stmt], *, deferred: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements that run: at import time, or (``deferred``) also inside functions.

    ``if TYPE_CHECKING:`` blocks never run, so they are skipped.
    """
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _import_nodes(node.body, deferred=deferred)
            yield from _import_nodes(node.orelse, deferred=deferred)
        elif isinstance(node, ast.Try | ast.With):
            for block in ("body", "handlers", "orelse", "finalbody"):
                for part in getattr(node, block, []):
                    inner = part.body if isinstance(part, ast.ExceptHandler) else [part]
                    yield from _import_nodes(inner, deferred=deferred)
        elif isinstance(node, ast.ClassDef) or (  # a class body runs at import time
            deferred and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        ):
            yield from _import_nodes(node.body, deferred=deferred)


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The llmlat modules an import statement executes (``from pkg import name``: the
    submodule ``pkg.name`` when there is one, else ``pkg``)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:  # relative: from the package that holds `module`
        package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    for alias in node.names:
        yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base


def _graph(*, deferred: bool) -> dict[str, set[str]]:
    graph = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        graph[module] = {
            target
            for node in _import_nodes(tree.body, deferred=deferred)
            for target in _targets(module, node)
            if target in MODULES and target != module
        }
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_sees_the_package() -> None:
    graph = _graph(deferred=False)
    assert "llmlat._engine" in graph and "llmlat._client" in graph["llmlat._engine"]
    assert "llmlat._transport" in _reachable(graph, "llmlat._engine")


@pytest.mark.parametrize("deferred", [False, True], ids=["on-import", "with-function-imports"])
def test_no_import_cycles_among_llmlat_modules(deferred: bool) -> None:
    # on import: what runs when a module is first imported; an import inside a function that
    # closes a circle hides a layering problem as well
    cycles = _cycles(_graph(deferred=deferred))
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


ENGINE = ("llmlat._engine", "llmlat._client", "llmlat._transport", "llmlat._apis")


def _in(module: str, roots: tuple[str, ...]) -> bool:
    return any(module == r or module.startswith(r + ".") for r in roots)


def test_the_engine_never_imports_the_package_root() -> None:
    offenders = []
    for module, path in MODULES.items():
        if not _in(module, ENGINE):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            root = isinstance(node, ast.Import) and any(a.name == "llmlat" for a in node.names)
            root |= isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "llmlat"
            if root:
                offenders.append(f"{module}:{node.lineno}")
    assert not offenders, f"the engine imports the package root at {offenders}"


NOTEBOOK_AND_PLOTS = ("llmlat._ipython", "llmlat.plot", "llmlat._report")
STATISTICS = ("llmlat.fitting", "llmlat.queueing", "llmlat._summary", "llmlat._aggregate")

# (who, what it never imports, counting imports inside functions too): the design's one-way flow
LAYER_RULES = [
    pytest.param(ENGINE, NOTEBOOK_AND_PLOTS, True, id="engine-no-notebook-or-plots"),
    pytest.param(("llmlat.sim",), ENGINE, True, id="simulator-no-client"),
    pytest.param(STATISTICS, ENGINE, True, id="statistics-no-http"),
    pytest.param(("llmlat.results",), NOTEBOOK_AND_PLOTS, False, id="data-no-drawing-on-import"),
]


@pytest.mark.parametrize(("who", "never", "deferred"), LAYER_RULES)
def test_layer_rule(who: tuple[str, ...], never: tuple[str, ...], deferred: bool) -> None:
    graph = _graph(deferred=deferred)
    layer = [m for m in MODULES if _in(m, who)]
    assert layer, f"no module in {who}: the rule checks nothing"
    for module in layer:
        bad = sorted(r for r in _reachable(graph, module) if _in(r, never))
        assert not bad, f"{module} imports {bad}"


def test_importing_the_client_loads_no_pandas_or_plotting() -> None:
    heavy = ("pandas", "seaborn", "matplotlib", "IPython")
    assert modules_loaded("import llmlat._client", heavy) == []


# --- the wheel --------------------------------------------------------------------------------

_NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis",
    "report",
)  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_wheel_ships_the_datasets(tmp_path: Path) -> None:
    """Build sdist and wheel (offline, with this environment's setuptools), install the wheel
    into a fresh venv that borrows this environment's dependencies, load datasets from it."""
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=_NOT_SOURCES)
    dist = tmp_path / "dist"
    build = [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(src)]
    proc = subprocess.run(build, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (wheel,) = dist.glob("llmlat-*.whl")

    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    sources = {p.relative_to(REPO).as_posix() for p in PACKAGE.rglob("*.py")}
    assert sources <= names, f"missing from the wheel: {sorted(sources - names)}"
    assert "llmlat/_datasets/README.md" in names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    # this environment's packages (pandas, pyarrow...) after the venv's own: plain paths, so
    # its .pth files, among them an editable install of llmlat, are not run
    ours = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (Path(purelib) / "_borrowed.pth").write_text("\n".join(ours) + "\n", encoding="utf-8")
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps"]
    proc = subprocess.run([*install, "--no-index", "--quiet", str(wheel)], capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]

    code = (
        "import llmlat; from llmlat import datasets\n"
        "print(llmlat.__file__); print(datasets.root())\n"
        "table = datasets.load('inferencex-closedloop/gpt-oss-120b')\n"
        "sweep = datasets.load('fit-mmc/sweep')\n"
        "print(len(table), len(sweep.requests), 'License' in table.attrs['source'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    out = subprocess.run(
        [python, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    module, root, counts = out.stdout.splitlines()
    assert Path(module).is_relative_to(purelib) and Path(root) == Path(purelib) / "llmlat/_datasets"
    rows, requests, licensed = counts.split()
    assert int(rows) == 8 and int(requests) > 0 and licensed == "True"
    # and the command the wheel installs runs
    version = subprocess.run(
        [venv / "bin" / "llmlat", "--version"], env=env, capture_output=True, text=True
    )
    assert version.returncode == 0 and llmlat.__version__ in version.stdout + version.stderr


def test_a_checkout_reads_its_datasets_folder_in_place() -> None:
    assert llmlat.datasets.root() == REPO / "datasets"
