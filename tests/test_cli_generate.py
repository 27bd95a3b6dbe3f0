"""`specchat generate` end to end, in a subprocess: replies written, a torn run resumed, bad input refused."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tiny_gguf import tiny_hf_model, write_gguf

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = [
    {"prompt": "hello there"},
    {"messages": [{"role": "user", "content": "abc"}], "id": "conversation"},
    {"prompt": "more text here, a little longer than the others"},
    {"prompt": "d"},
    {"prompt": "the fifth"},
]


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    return write_gguf(tiny_hf_model("qwen2", seed=3), tmp_path_factory.mktemp("generate") / "tiny.gguf")


def specchat_generate(gguf, prompts: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "specchat", "generate", "--model", str(gguf), "--device", "cpu",
           "--prompts", str(prompts), "--out", str(out), "--max-tokens", "6", "--temperature", "0.9",
           "--batch-size", "2", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def write_jsonl(path: Path, items) -> Path:
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


def replies(out: Path) -> dict:
    return {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}


def test_generate_writes_every_reply_and_a_torn_run_resumes_to_the_same_replies(gguf, tmp_path):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", PROMPTS)
    whole = tmp_path / "whole.jsonl"
    done = specchat_generate(gguf, prompts, whole)
    assert done.returncode == 0, done.stderr
    assert "5/5" in done.stderr
    assert "5 of 5 replies appended" in done.stderr and "prefill" in done.stderr and "decode" in done.stderr
    expected = replies(whole)
    assert sorted(expected, key=str) == sorted([1, "conversation", 3, 4, 5], key=str)
    for reply in expected.values():
        assert 1 <= len(reply["tokens"]) <= 6 and reply["finish"] in ("stop", "length")
        assert isinstance(reply["response"], str)

    # an interrupted run: two replies written, the third cut off mid-line
    lines = whole.read_text().splitlines(keepends=True)
    torn = tmp_path / "torn.jsonl"
    torn.write_text(lines[0] + lines[1] + lines[2][:20])
    resumed = specchat_generate(gguf, prompts, torn)
    assert resumed.returncode == 0, resumed.stderr
    assert "3/3" in resumed.stderr  # only the prompts without a whole reply ran
    assert torn.read_text().startswith(lines[0] + lines[1])
    assert replies(torn) == expected  # each prompt's seed is its own: resuming changes no reply

    again = specchat_generate(gguf, prompts, torn)
    assert again.returncode == 0 and "already have replies" in again.stderr
    assert replies(torn) == expected


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([json.dumps(PROMPTS[0]), "{\"prompt\": \"unterminated}"], "prompts.jsonl line 2: not JSON"),
        ([json.dumps(PROMPTS[0]), "", json.dumps({"text": "no prompt field"})],
         "prompts.jsonl line 3: needs a non-empty \"prompt\" string or \"messages\" list"),
        ([json.dumps({"prompt": "a", "id": 7}), json.dumps({"prompt": "b", "id": 7})],
         "prompts.jsonl line 2: id 7 was already used on line 1"),
        ([], "prompts.jsonl holds no prompts"),
        ([json.dumps(PROMPTS[0]), json.dumps({"prompt": "long " * 40})],
         "prompts.jsonl line 2: the prompt has"),
    ],
)
def test_bad_input_is_one_line_naming_it_and_loses_nothing_written(gguf, tmp_path, lines, message):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(line + "\n" for line in lines))
    out = tmp_path / "out.jsonl"
    earlier = json.dumps({"id": "earlier", "line": 9, "response": "kept", "tokens": [1], "finish": "stop"}) + "\n"
    out.write_text(earlier)
    result = specchat_generate(gguf, prompts, out, "--max-context", "64")
    assert result.returncode == 1
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("specchat: ") and message in error
    assert "Traceback" not in result.stderr
    assert out.read_text() == earlier
