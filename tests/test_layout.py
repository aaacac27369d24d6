"""The library never imports prefect: orchestration stays in tasks/ and flows/."""

from __future__ import annotations

import itertools
import subprocess
import sys


def test_populora_core_does_not_import_prefect():
    code = (
        "import sys, pkgutil, importlib, populora_core\n"
        "for m in pkgutil.walk_packages(populora_core.__path__, 'populora_core.'):\n"
        "    if not m.name.endswith('.worker'):\n"
        "        importlib.import_module(m.name)\n"
        "assert 'prefect' not in sys.modules, 'populora_core imported prefect'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_modules_and_functions_stay_small():
    """No module of the library, the tasks, the flows or the command line over 400 lines, no
    function over 60."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    too_long = []
    for package in ("populora_core", "tasks", "flows", "cli"):
        for path in sorted((root / package).rglob("*.py")):
            source = path.read_text()
            if len(source.splitlines()) > 400:
                too_long.append(f"{path.relative_to(root)}: {len(source.splitlines())} lines")
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = node.end_lineno - node.lineno + 1
                    if length > 60:
                        too_long.append(f"{path.relative_to(root)}:{node.lineno} {node.name}(): {length} lines")
    assert not too_long, "\n".join(too_long)


def test_the_judges_harness_imports_only_the_standard_library():
    """populora_core/harness/ runs in the sandbox, whose interpreter has the standard library and
    the harness alone (no site-packages, nothing else of this project)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "populora_core" / "harness"
    outside = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] if node.level == 0 else []  # a relative import stays inside
            for name in names:
                if name.split(".")[0] not in sys.stdlib_module_names and not name.startswith("populora_core.harness"):
                    outside.append(f"{path.name}:{node.lineno} imports {name}")
    assert not outside, outside


def test_flows_import_only_tasks_the_run_module_and_config():
    """Flows orchestrate: what they compute lives in the core, reached through tasks."""
    import ast
    from pathlib import Path

    allowed = (
        "tasks",
        "flows",
        "populora_core.run",
        "populora_core.rundir.lock",
        "populora_core.config",
        "populora_core.stages.table",
    )
    allowed += ("prefect",)
    root = Path(__file__).resolve().parents[1] / "flows"
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                top = node.module
                stdlib = top.split(".")[0] in ("__future__", "pathlib", "time", "collections", "typing")
                assert stdlib or top.startswith(allowed), f"{path.name} imports {top}"


def _imported(module: str, path, known: set[str]) -> set[str]:
    """The project's modules ``module`` imports anywhere: at the top, inside a function, and
    under ``if TYPE_CHECKING:`` (a type-only import still makes a reader hold both files)."""
    import ast

    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            source = ".".join([*base, *([node.module] if node.module else [])])
            found.add(source)
            found.update(f"{source}.{alias.name}" for alias in node.names)
    resolved = set()
    for name in found:  # `from pkg import thing`: the module `pkg.thing`, else `pkg`
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            resolved.add(name)
    return resolved


def _project_modules() -> dict:
    """Module name → file of every module of the library, the tasks, the flows and the CLI."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    paths = {}
    for package in ("populora_core", "tasks", "flows", "cli"):
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return paths


def _circles(graph: dict) -> list[list[str]]:
    """Every path from a node back to itself (depth-first from each node, in name order)."""
    circles = []
    for start in sorted(graph):
        stack, seen = [(start, [start])], set()
        while stack:
            node, trail = stack.pop()
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    circles.append([*trail, start])
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
    return circles


def test_no_import_circles():
    """No module of the library, the tasks, the flows or the command line reaches itself
    through its imports, lazy and type-only ones included, inside a package too: a circle
    hidden in a function or a TYPE_CHECKING block is still two files that need each other."""
    paths = _project_modules()
    graph = {name: _imported(name, path, set(paths)) for name, path in paths.items()}
    circles = [" → ".join(c) for c in _circles(graph)]
    assert not circles, "\n".join(sorted(circles, key=len)[:10])


def _package(module: str) -> str:
    """The layer a module belongs to: ``populora_core.<package>`` (or the library's top-level
    module), else the top package (``tasks``, ``flows``, ``cli``)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "populora_core" else parts[0]


def test_no_package_needs_another_that_needs_it():
    """The library's packages are layers: no package reaches itself through another's imports
    (lazy and type-only ones included), e.g. the run directory's files (``rundir``) below the
    population that writes them, and the run (``populora_core.run``) above both. A circle of
    packages is a layer that cannot be read, tested or moved alone."""
    paths = _project_modules()
    graph: dict[str, dict[str, str]] = {}  # package → package it imports → one module pair saying so
    for name, path in paths.items():
        for dep in _imported(name, path, set(paths)):
            a, b = _package(name), _package(dep)
            if a != b and "populora_core" not in (a, b):  # the package's own __init__ is no layer
                graph.setdefault(a, {}).setdefault(b, f"{name} → {dep}")
    circles = [
        " → ".join(c) + f"  ({'; '.join(graph[a][b] for a, b in itertools.pairwise(c))})" for c in _circles(graph)
    ]
    assert not circles, "\n".join(sorted(circles, key=len)[:10])
