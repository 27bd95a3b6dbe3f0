"""The README's Python example runs as written and prints what a reader expects."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.loading import packs

README = Path(__file__).parent.parent / "README.md"


def python_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    assert len(blocks) == 1, "the README has one Python example"
    return blocks[0]


@pytest.mark.skipif(not (packs.model_dir("smollm2-135m") / "config.json").exists(), reason="smollm2-135m not cached")
def test_the_python_example_prints_no_special_tokens_and_its_stream_stops(capsys):
    names: dict = {}
    exec(compile(python_example(), str(README), "exec"), names)  # noqa: S102 - the README's own code
    printed = capsys.readouterr().out
    assert "<|im_end|>" not in printed and "<|im_start|>" not in printed
    assert names["result"].finished == "stop"
    assert names["step"].finished == "stop"  # at the end of the turn, not after 256 invented tokens
    assert names["step"].tokens[-1] in names["model"].stop_ids()
