"""The engine's layout rules: the app enters through one door, and the engine's modules form no cycle.

Both are read from the source with `ast`, imports inside functions included, so a cycle cannot
hide in a function body and no app module can reach around `engine.__all__`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import engine

ROOT = Path(__file__).resolve().parent.parent


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[ast.ImportFrom | ast.Import]:
    tree = ast.parse(path.read_text())
    return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The engine modules `path` imports: `from a.b import c` names a.b.c when that is a module."""
    found = set()
    for node in imports(path):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found & known


def test_the_app_imports_only_what_engine_exports():
    behind = []
    for path in sorted((ROOT / "specchat").rglob("*.py")):
        for node in imports(path):
            if isinstance(node, ast.Import):
                behind += [f"{path.name}: import {a.name}" for a in node.names if a.name.startswith("engine.")]
            elif node.module and node.module.startswith("engine."):
                behind.append(f"{path.name}: from {node.module} import ...")
            elif node.module == "engine":
                behind += [f"{path.name}: {a.name}" for a in node.names if a.name not in engine.__all__]
    assert behind == []


def test_the_engine_has_no_import_cycle():
    files = {module_name(p): p for p in (ROOT / "engine").rglob("*.py")}
    graph = {m: imported_modules(p, set(files)) - {m} for m, p in files.items()}
    # a package's __init__ that re-exports from its own children is the package's door, not a cycle
    graph["engine"] = set()
    for m in graph:
        graph[m] = {d for d in graph[m] if not m.startswith(d + ".") or files[d].name != "__init__.py"}
    cycles = []
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycles.append(path[path.index(d):] + [d] if d in path else [m, d])
            elif d not in state:
                visit(d, [*path, d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == []


def test_the_step_limit_is_defined_once():
    """MAX_STEP (and MAX_K, PAGE_SIZE) are assigned in engine/limits.py and nowhere else."""
    assigned = []
    for path in (ROOT / "engine").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name) and t.id in ("MAX_STEP", "MAX_K", "PAGE_SIZE"):
                        assigned.append(f"{path.relative_to(ROOT)}:{t.id}")
    assert sorted(assigned) == ["engine/limits.py:MAX_K", "engine/limits.py:MAX_STEP", "engine/limits.py:PAGE_SIZE"]
    assert engine.MAX_K == engine.MAX_STEP - 1


def test_tests_share_helpers_through_modules_that_hold_no_tests():
    """A test module imports nothing from another test module (helpers live in conftest.py,
    pilot.py, scripted.py and the like), so running one test file never collects another."""
    borrowed = [
        f"{path.name}: {node.module}"
        for path in sorted((ROOT / "tests").glob("*.py"))
        for node in imports(path)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests.test_")
    ]
    assert borrowed == []
