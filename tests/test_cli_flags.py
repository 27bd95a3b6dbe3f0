"""The commands' flags: one rule for k, a word when a flag does nothing, a context that fills said
as such, a --max-context bounded by the model and the memory, and `pull` saying what is here."""

from __future__ import annotations

import pytest

import engine.runtime.kv_budget
from engine import EngineError, random_model
from engine.loading import packs
from specchat.__main__ import main
from tests.conftest import tiny_config


def run(capsys, *argv: str) -> tuple[int, str, list[str]]:
    """Exit status, standard output and the lines of standard error of `specchat ARGV`."""
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, [line for line in err.splitlines() if line.strip()]


def test_max_context_past_the_models_positions_is_one_line(gguf, capsys):
    status, _, err = run(capsys, "run", "--model", gguf, "--prompt", "hi", "--max-context", "99999999")
    assert status == 1
    assert err[-1] == (
        "specchat: --max-context must be from 32 to 256 (the positions tiny was trained for), got 99,999,999"
    )


def test_a_kv_cache_larger_than_the_free_memory_is_refused_with_its_size(monkeypatch):
    monkeypatch.setattr(engine.runtime.kv_budget, "free_memory", lambda device: 2**17)
    with pytest.raises(EngineError) as err:
        random_model(tiny_config(), max_context=1024)  # 2 x 2 layers x 1040 x 2 heads x 8 x 4 bytes
    assert str(err.value) == "--max-context 1,024 needs 0.3 MiB of KV cache and cpu has 0.1 MiB free: give at most about 453"


def test_the_default_context_fits_a_model_with_fewer_positions(gguf, capsys):
    status, _, err = run(capsys, "run", "--model", gguf, "--prompt", "hi", "--max-tokens", "3")
    assert status == 0 and err[-1].startswith("[plain decoding] ")


def test_a_context_that_fills_is_said_in_the_summary(gguf, capsys):
    status, _, err = run(capsys, "run", "--model", gguf, "--raw", "--prompt", "ab" * 20,
                         "--max-context", "48", "--max-tokens", "200")
    assert status == 0
    assert err[-1].endswith("stopped: the context is full (--max-context 48, the prompt took 40)")


def test_a_reply_that_reaches_its_budget_does_not_blame_the_context(gguf, capsys):
    _, _, err = run(capsys, "run", "--model", gguf, "--raw", "--prompt", "ab", "--max-tokens", "5")
    assert "context is full" not in err[-1]


@pytest.mark.parametrize("flags", [["--speculate", "0"], ["--speculate", "16"], ["--draft", "x", "-k", "0"]])
def test_k_out_of_range_is_refused_by_run_and_chat_alike(gguf, capsys, flags):
    for command in (["run", "--prompt", "hi"], ["chat"]):
        status, _, err = run(capsys, *command, "--model", gguf, *flags)
        assert status == 1 and err[-1].startswith("specchat: ") and "k must be a whole number from 1 to 15" in err[-1]


def test_k_without_a_drafter_says_it_has_no_effect(gguf, capsys):
    status, _, err = run(capsys, "run", "--model", gguf, "--prompt", "hi", "-k", "4", "--max-tokens", "2")
    assert status == 0
    assert err[-2] == ("specchat: -k has no effect without a proposer: decoding plainly "
                      "(--speculate K, --proposer NAME, --draft or --dflash)")


def test_compare_takes_run_s_prompt_and_max_tokens(gguf, capsys):
    status, out, _ = run(capsys, "compare", "--model", gguf, "--prompt", "abab abab", "--max-tokens", "4",
                         "--k", "2", "--repeats", "1", "--warmup", "0")
    assert status == 0 and "n-gram" in out


def test_pull_lists_which_packs_are_in_the_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPECCHAT_CACHE", str(tmp_path))
    (packs.model_dir("qwen2.5-coder-0.5b")).mkdir(parents=True)
    (packs.model_dir("qwen2.5-coder-0.5b") / "config.json").write_text("{}")
    status, out, _ = run(capsys, "pull")
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert status == 0
    assert "in the cache" in lines["qwen2.5-coder-0.5b"] and "not fetched" in lines["smollm2-135m"]
    assert out.splitlines()[-1] == f"cache: {tmp_path}"
