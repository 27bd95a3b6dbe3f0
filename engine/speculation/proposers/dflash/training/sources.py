"""Code to ask about, from what is installed here: no network. The Python standard library and
the pure-Python packages beside it, cut into top-level functions and classes with `ast`.

Two sets of modules stay out of training, by name: the bench's prompt source (textwrap) and a
fixed held-out list whose code gives the evaluation prompts, so a drafter is measured on code
it never trained on."""

from __future__ import annotations

import ast
import sysconfig
from dataclasses import dataclass
from pathlib import Path

BENCH_MODULES = ("textwrap",)  # the bench's edit and explanation prompts are built from it
HELD_OUT_MODULES = ("difflib", "heapq", "fractions", "shlex", "calendar", "statistics", "ipaddress", "glob")
SKIPPED_FOLDERS = {"test", "tests", "idlelib", "lib2to3", "site-packages", "dist-packages", "__pycache__",
                   "turtledemo", "ensurepip", "pydoc_data", "vendor", "_vendor"}
MIN_LINES, MAX_LINES = 6, 80


@dataclass
class CodeUnit:
    module: str  # dotted name, e.g. "json.decoder"
    source: str  # "stdlib" or "site-packages"
    name: str  # the function or class
    kind: str  # "function" or "class"
    code: str
    arguments: list[str]  # a function's parameters (a class's: none)


def roots() -> list[tuple[str, Path]]:
    paths = sysconfig.get_paths()
    found = [("stdlib", Path(paths["stdlib"]))]
    if Path(paths["purelib"]).is_dir():
        found.append(("site-packages", Path(paths["purelib"])))
    return found


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def top_module(name: str) -> str:
    return name.split(".")[0]


def pure_python(folder: Path) -> bool:
    """A package with no compiled extension: its code is all Python someone wrote."""
    return not any(True for pattern in ("*.so", "*.pyd") for _ in folder.rglob(pattern))


def python_files(source: str, root: Path) -> list[Path]:
    if source == "stdlib":
        return sorted(root.rglob("*.py"))
    packages = [d for d in sorted(root.iterdir()) if d.is_dir() and d.name.isidentifier() and pure_python(d)]
    return [path for d in packages for path in sorted(d.rglob("*.py"))]


def source_files(held_out: bool = False) -> list[tuple[str, str, Path]]:
    """(source, module, path) of every usable file, sorted: the training files, or with
    held_out=True the held-out modules' files. The bench's modules are in neither; installed
    packages count only where they are pure Python."""
    files = []
    for source, root in roots():
        for path in python_files(source, root):
            relative = path.relative_to(root).parts
            inside_stdlib_packages = source == "stdlib" and relative[0] in ("site-packages", "dist-packages")
            if inside_stdlib_packages or SKIPPED_FOLDERS.intersection(relative[:-1]) or relative[0].startswith("_"):
                continue
            module = module_name(root, path)
            if not module or top_module(module) in BENCH_MODULES:
                continue
            if (top_module(module) in HELD_OUT_MODULES) == held_out and (source == "stdlib" or not held_out):
                files.append((source, module, path))
    return files


def code_units(source: str, module: str, path: Path) -> list[CodeUnit]:
    """The file's top-level functions and classes of MIN_LINES..MAX_LINES lines."""
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return []
    units = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        lines = node.end_lineno - node.lineno + 1
        if not MIN_LINES <= lines <= MAX_LINES:
            continue
        code = ast.get_source_segment(text, node)
        if code is None:
            continue
        is_class = isinstance(node, ast.ClassDef)
        arguments = [] if is_class else [a.arg for a in node.args.args if a.arg not in ("self", "cls")]
        units.append(CodeUnit(module, source, node.name, "class" if is_class else "function", code, arguments))
    return units
