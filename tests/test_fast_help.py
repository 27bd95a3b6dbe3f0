"""The help and the parser's own errors answer without loading torch: the registry's declarations
name every proposer, and each command is imported only when it runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Runs `python -m specchat ARGS...`, then prints which of the slow libraries it imported.
LOADED_AFTER = """
import runpy, sys
try:
    runpy.run_module("specchat", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
print(*sorted(name for name in ("torch", "textual", "transformers") if name in sys.modules))
"""


def slow_imports(*argv: str) -> tuple[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", LOADED_AFTER, *argv], capture_output=True, text=True, env=env,
                          cwd=ROOT, check=True)
    *shown, loaded = done.stdout.splitlines() or [""]
    return loaded, "\n".join(shown) + done.stderr


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["bench", "--help"], ["run", "--no-such-option"]])
def test_help_and_argument_errors_do_not_import_torch(argv):
    loaded, shown = slow_imports(*argv)
    assert loaded == ""
    assert "usage: specchat" in shown


def test_the_help_still_lists_every_proposer_from_the_registry():
    _, shown = slow_imports("run", "--help")
    assert "--proposer {ngram,draft,dflash,auto}" in shown and "--dflash DRAFTER" in shown
