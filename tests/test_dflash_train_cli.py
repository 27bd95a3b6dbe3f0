"""`specchat dflash-prompts` and `specchat train-dflash`: prompts made from installed code with the
bench's and the held-out modules kept out, a drafter written where --dflash and the chat find it,
resumed runs, and one-line refusals."""

import gzip
import json
import lzma
import random
from collections import Counter

import pytest

from engine import ProposerOptions, load_proposer, offered, random_model, write_random_drafter
from engine.speculation.proposers.dflash.training import run as training_run
from engine.speculation.proposers.dflash.training.data import build_prompts
from engine.speculation.proposers.dflash.training.sources import (
    BENCH_MODULES,
    HELD_OUT_MODULES,
    LONG_MAX_CHARS,
    MAX_LINES,
    CodeUnit,
    top_module,
)
from engine.speculation.proposers.dflash.training.tasks import TASKS, fix
from specchat.__main__ import main
from tests.conftest import tiny_config
from tests.tiny_gguf import tiny_hf_model, write_gguf


def test_training_prompts_leave_out_the_bench_and_held_out_modules():
    lines = build_prompts(40, seed=1)
    assert len(lines) == 40 and len({line["id"] for line in lines}) == 40
    kept_out = set(BENCH_MODULES) | set(HELD_OUT_MODULES)
    assert not {top_module(line["module"]) for line in lines} & kept_out
    assert {line["source"] for line in lines} == {"stdlib", "site-packages"}
    assert len({line["task"] for line in lines}) >= 5
    held_out = build_prompts(10, seed=1, held_out=True)
    assert {top_module(line["module"]) for line in held_out} <= set(HELD_OUT_MODULES)
    assert build_prompts(40, seed=1) == lines  # the same count and seed, the same prompts


def test_no_package_fills_the_training_prompts():
    lines = build_prompts(150, seed=2)
    packages = Counter((line["source"], top_module(line["module"])) for line in lines)
    assert max(packages.values()) <= 6  # 4 % of 150, rounded up to a file's three units
    assert len(packages) >= 30
    assert all(line["root"] for line in lines)  # the data card names where the code was read


def test_some_training_prompts_hold_long_code_as_pasted_files_do():
    """A share of the prompts carries more than MAX_LINES lines (a long class or function, or a
    run of a module's definitions), none over LONG_MAX_CHARS, so a drafter trains at positions as
    deep into a context as a pasted file puts them."""
    lines = build_prompts(150, seed=2)
    code = [line["messages"][0]["content"].split("```python\n")[1].split("\n```")[0] for line in lines]
    long = [c for c in code if len(c.splitlines()) > MAX_LINES]
    assert 0.15 <= len(long) / len(code) <= 0.5
    assert max(len(c) for c in code) <= LONG_MAX_CHARS


def test_long_only_prompts_hold_long_code_up_to_the_bound_asked():
    """For measuring a drafter at contexts as long as a pasted file: every prompt on a long unit,
    up to --long-chars characters (longer than training's default bound)."""
    lines = build_prompts(12, seed=0, held_out=True, long_only=True, long_chars=10_000)
    code = [line["messages"][0]["content"].split("```python\n")[1].split("\n```")[0] for line in lines]
    assert lines and all(len(c.splitlines()) > MAX_LINES or len(c) > LONG_MAX_CHARS for c in code)
    assert max(len(c) for c in code) > LONG_MAX_CHARS and all(len(c) <= 10_000 for c in code)
    assert {top_module(line["module"]) for line in lines} <= set(HELD_OUT_MODULES)


def test_a_fix_task_shows_code_with_one_change():
    code = "def clamp(x, low, high):\n    if x <= low:\n        return low\n    return min(x, high)\n" * 2
    unit = CodeUnit("m", "stdlib", "clamp", "function", code, ["x", "low", "high"])
    message = fix(unit, random.Random(0))
    shown = message.split("```python\n")[1].split("\n```")[0]
    assert shown != code and len(shown.splitlines()) == len(code.splitlines())
    assert set(TASKS) == {"rename", "refactor", "explain", "document", "tests", "complete", "fix", "translate"}


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    return write_gguf(tiny_hf_model("qwen2", seed=3), tmp_path_factory.mktemp("train") / "tiny.gguf")


def write_data(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    replies = tmp_path / "replies.jsonl"
    lines = [{"id": f"train-{i}", "messages": [{"role": "user", "content": f"rename x{i} to y{i}"}],
              "task": "rename", "module": "m", "source": "stdlib"} for i in range(4)]
    prompts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    replies.write_text("".join(json.dumps({"id": line["id"], "tokens": [5, 6, 7, 8, 9, 10] * 3, "finish": "length"})
                               + "\n" for line in lines))
    return prompts, replies


def train_cli(gguf, prompts, replies, out, *extra):
    return main(["train-dflash", "--model", str(gguf), "--device", "cpu", "--prompts", str(prompts), "--replies",
                 str(replies), "--out", str(out), "--layers", "1", "--anchors", "4", "--batch-size", "2",
                 "--max-length", "64", *extra])


def test_train_dflash_writes_a_drafter_and_its_data_card_and_resumes(gguf, tmp_path, capsys):
    prompts, replies = write_data(tmp_path)
    out = tmp_path / "drafter"
    assert train_cli(gguf, prompts, replies, out, "--steps", "2") == 0
    assert "after 2 steps" in capsys.readouterr().err
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["DFlashDraftModel"] and config["num_hidden_layers"] == 1
    card = json.loads((out / "data-card.json").read_text())
    assert card["samples"] == 4 and card["reply_tokens"] == 4 * 18 and "textwrap" in card["excluded"]["bench_modules"]
    assert (out / "DATA.md").is_file()

    assert train_cli(gguf, prompts, replies, out, "--steps", "2") == 1  # a second run would overwrite the first
    assert "--resume" in capsys.readouterr().err
    assert train_cli(gguf, prompts, replies, out, "--resume") == 0  # continues to the first run's 2 steps
    assert "after 2 steps" in capsys.readouterr().err

    assert main(["run", "--model", str(gguf), "--device", "cpu", "--dflash", str(out), "--prompt", "hi",
                 "--max-tokens", "8"]) == 0


def test_train_dflash_with_a_drafter_vocabulary_writes_it_says_it_and_runs_with_it(gguf, tmp_path, capsys):
    prompts, replies = write_data(tmp_path)
    out = tmp_path / "drafter"
    assert train_cli(gguf, prompts, replies, out, "--steps", "2", "--draft-vocab", "5") == 0
    kept = json.loads((out / "draft_vocab.json").read_text())["token_ids"]
    assert len(kept) == 5 and kept == sorted(kept)
    assert json.loads((out / "data-card.json").read_text())["draft_vocab"] == 5
    assert "drafts over the 5 tokens" in (out / "DATA.md").read_text()
    assert main(["run", "--model", str(gguf), "--device", "cpu", "--dflash", str(out), "--prompt", "hi",
                 "--max-tokens", "8"]) == 0


@pytest.mark.parametrize("suffix,compress", [(".gz", gzip.compress), (".xz", lzma.compress)])
def test_compressed_prompts_and_replies_train_as_the_plain_files_do(gguf, tmp_path, capsys, suffix, compress):
    """Files kept compressed (bench/training-data keeps them as .xz) are read as they are; a
    damaged one is refused in one line that names it."""
    prompts, replies = write_data(tmp_path)
    packed = []
    for path in (prompts, replies):
        packed.append(path.with_name(path.name + suffix))
        packed[-1].write_bytes(compress(path.read_bytes()))
    assert train_cli(gguf, *packed, tmp_path / "drafter", "--steps", "1") == 0
    assert json.loads((tmp_path / "drafter" / "data-card.json").read_text())["samples"] == 4
    capsys.readouterr()
    packed[1].write_bytes(packed[1].read_bytes()[: len(packed[1].read_bytes()) // 2])  # cut short
    assert train_cli(gguf, *packed, tmp_path / "again", "--steps", "1") == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "cannot read" in err.splitlines()[-1] and packed[1].name in err


def test_replies_made_by_another_model_are_refused_in_one_line(gguf, tmp_path, capsys):
    """A drafter learns its own target's replies: token ids past its vocabulary, or tokens that
    do not spell the reply's text with its tokenizer, name the file and stop before training."""
    prompts, replies = write_data(tmp_path)
    lines = [json.loads(line) for line in replies.read_text().splitlines()]
    replies.write_text("".join(json.dumps({**line, "tokens": [5, 6, 10**6]}) + "\n" for line in lines))
    assert train_cli(gguf, prompts, replies, tmp_path / "a", "--steps", "1") == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "outside" in err.splitlines()[-1] and "another model" in err.splitlines()[-1]
    replies.write_text("".join(json.dumps({**line, "response": "not what the tokens say"}) + "\n" for line in lines))
    assert train_cli(gguf, prompts, replies, tmp_path / "b", "--steps", "1") == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "were not made by" in err.splitlines()[-1]


def test_a_target_too_large_for_this_machine_is_refused_in_one_line(monkeypatch):
    from engine import EngineError

    monkeypatch.setattr(training_run, "CPU_LIMIT", 1000)
    target = random_model(tiny_config("qwen2"))
    with pytest.raises(EngineError, match="needs a CUDA GPU"):
        training_run.check_machine(target)


def test_the_chat_finds_a_drafter_trained_for_its_pack_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_CACHE", str(tmp_path))
    target = random_model(tiny_config("qwen3", num_layers=4), max_context=128)
    target.name = "qwen2.5-coder-1.5b"  # as load_model names a pack's model
    assert "dflash" not in [s.name for s in offered({}, target)]
    write_random_drafter(tmp_path / "qwen2.5-coder-1.5b" / "dflash", target, num_layers=1)
    assert "dflash" in [s.name for s in offered({}, target)]
    assert "dflash" not in [s.name for s in offered({})]  # no target loaded yet: nothing to look for
    loaded = load_proposer("dflash", target, ProposerOptions({}))
    assert loaded.make().k == 15


def test_a_drafter_starts_from_the_target_unless_told_otherwise():
    """The start that measured best on the H200 is the command's default; random weights on request."""
    import argparse

    from specchat.arguments import add_train_arguments

    p = argparse.ArgumentParser()
    add_train_arguments(p)
    base = ["--model", "m", "--prompts", "p.jsonl", "--replies", "r.jsonl"]
    assert p.parse_args(base).start_from_target is True
    assert p.parse_args([*base, "--no-start-from-target"]).start_from_target is False
