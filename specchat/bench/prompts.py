"""The bench prompts: two tasks on one fixed source file, the stdlib's textwrap.TextWrapper.

The source is read at run time (inspect) and normalised through the AST: docstrings and comments
go, which brings the class and the module functions that use it (wrap, fill, shorten) to about
1.5K tokens, and makes the text the same whatever formatting the installed Python ships.
An edit copies most of that text back (prompt lookup's best case); an explanation copies little.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import textwrap
from dataclasses import dataclass
from pathlib import Path

from engine import EngineError


@dataclass(frozen=True)
class Prompt:
    name: str  # short key: "edit", "explain", or a file's stem
    title: str  # the row heading in the tables
    text: str  # the user message

    @property
    def digest(self) -> str:
        """Short hash of the text: two runs compare only when their prompts are the same."""
        return hashlib.sha256(self.text.encode()).hexdigest()[:12]


def source_code() -> str:
    """textwrap.TextWrapper with wrap, fill and shorten, without docstrings or comments."""
    return normalised_source([textwrap.TextWrapper, textwrap.wrap, textwrap.fill, textwrap.shorten])


def normalised_source(objects) -> str:
    """The source of classes and functions, without docstrings or comments."""
    tree = ast.parse("\n\n".join(inspect.getsource(obj) for obj in objects))
    for node in ast.walk(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and ast.get_docstring(node) is not None:
            node.body = node.body[1:] or [ast.Pass()]
    return ast.unparse(tree) + "\n"


def builtin_prompts() -> dict[str, Prompt]:
    code = f"```python\n{source_code()}```"
    return {
        "edit": Prompt(
            "edit",
            "edit: rename a type throughout the code",
            "Rename the class TextWrapper to LineWrapper everywhere in this code. Reply with the whole "
            f"updated code and nothing else.\n\n{code}",
        ),
        "explain": Prompt(
            "explain",
            "explain the code",
            f"Explain what this code does: first its purpose, then each method in a sentence or two.\n\n{code}",
        ),
    }


def load_prompts(names: list[str] | None = None) -> list[Prompt]:
    """The bench's prompts by name ("edit", "explain"); a name that is a file reads that file."""
    builtin = builtin_prompts()
    if not names:
        return list(builtin.values())
    return [builtin[name] if name in builtin else prompt_from_file(name) for name in names]


def prompt_from_file(path: str) -> Prompt:
    file = Path(path).expanduser()
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as err:
        raise EngineError(
            f"no prompt {path!r}: not one of {', '.join(builtin_prompts())} and not a readable file "
            f"({err.strerror})"
        ) from None
    except UnicodeDecodeError:
        raise EngineError(f"cannot read the prompt file {path}: not UTF-8 text") from None
    if not text.strip():
        raise EngineError(f"the prompt file {path} is empty")
    return Prompt(file.stem, file.stem, text)
