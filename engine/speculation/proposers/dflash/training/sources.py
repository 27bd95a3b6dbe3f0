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
# Longer units (a whole class, a long function: what people paste as well), up to what leaves a
# reply room in a training sample of 2,048 tokens (some 1,400 tokens of code). Without them every
# training context was a few hundred tokens, and a drafter never learnt to read positions as far
# into a context as a pasted file puts them.
LONG_MAX_LINES, LONG_MAX_CHARS = 400, 5000


@dataclass
class CodeUnit:
    module: str  # dotted name, e.g. "json.decoder"
    source: str  # "stdlib" or "site-packages"
    name: str  # the function or class
    kind: str  # "function" or "class"
    code: str
    arguments: list[str]  # a function's parameters (a class's: none)

    @property
    def long(self) -> bool:
        return len(self.code.splitlines()) > MAX_LINES


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


def code_units(source: str, module: str, path: Path, long_chars: int = LONG_MAX_CHARS) -> list[CodeUnit]:
    """The file's top-level functions and classes of MIN_LINES..MAX_LINES lines, and the longer
    ones up to LONG_MAX_LINES lines and `long_chars` characters (`CodeUnit.long`)."""
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return []
    units = []
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
    for node in defs:
        lines = node.end_lineno - node.lineno + 1
        if not MIN_LINES <= lines <= LONG_MAX_LINES:
            continue
        code = ast.get_source_segment(text, node)
        if code is None or (lines > MAX_LINES and len(code) > long_chars):
            continue
        is_class = isinstance(node, ast.ClassDef)
        arguments = [] if is_class else [a.arg for a in node.args.args if a.arg not in ("self", "cls")]
        units.append(CodeUnit(module, source, node.name, "class" if is_class else "function", code, arguments))
    return units + windows(text, defs, source, module, long_chars)


def windows(text: str, defs: list[ast.stmt], source: str, module: str, long_chars: int = LONG_MAX_CHARS
            ) -> list[CodeUnit]:
    """Runs of consecutive top-level definitions, as a file's lines from the first one's start to
    the last one's end, of more than MAX_LINES lines and at most `long_chars` characters: a part
    of a module, as people paste one. They do not overlap."""
    lines = text.splitlines()
    out, start = [], 0
    while start < len(defs):
        end = start
        while end + 1 < len(defs) and len("\n".join(lines[defs[start].lineno - 1 : defs[end + 1].end_lineno]))\
                <= long_chars:
            end += 1
        code = "\n".join(lines[defs[start].lineno - 1 : defs[end].end_lineno])
        if end > start and code.count("\n") + 1 > MAX_LINES:
            out.append(CodeUnit(module, source, defs[start].name, "code", code, []))
        start = end + 1
    return out
