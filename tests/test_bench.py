"""`specchat bench` and `specchat compare` end to end on tiny random models (CPU, seconds)."""

import json
import statistics
import sys
import zlib

import pytest
import torch

import engine
from engine import ModelConfig, SamplingParams, random_model
from specchat.__main__ import main
from specchat.bench.prompts import load_prompts, source_code
from specchat.bench.report import write_chart
from specchat.bench.runs import SPECCHAT, Case, Job, Run, best_k, execute

VOCAB = 64
ROW_FIELDS = {
    "engine",
    "prompt",
    "sampling",
    "method",
    "k",
    "label",
    "deterministic",
    "new_tokens",
    "decode_tokens",
    "decode_s",
    "decode_s_runs",
    "tok_s",
    "prefill_ms",
    "speedup",
    "same_text",
    "first_difference",
    "tokens",
}
OUR_FIELDS = {
    "steps",
    "tokens_per_step",
    "drafted",
    "accepted",
    "acceptance_rate",
    "propose_ms",
    "verify_ms",
    "metrics",
    "transformers_tok_s",
    "ours_over_transformers",
}
ENVIRONMENT = {"device", "hardware", "dtype", "torch", "transformers", "commit", "date", "command"}


class LineTokenizer:
    """Stands in for a real tokenizer: one token per line of text (hashed into the vocabulary),
    so the bench prompts are about 200 tokens and a copied line is a copied token."""

    chat_template = None
    eos_token_id = None

    def encode(self, text: str) -> list[int]:
        return [zlib.crc32(line.encode()) % (VOCAB - 1) + 1 for line in text.splitlines()]

    def decode(self, ids: list[int]) -> str:
        return " ".join(f"t{i}" for i in ids)

    def get_vocab(self) -> dict[str, int]:
        return {f"t{i}": i for i in range(VOCAB)}


def tiny(name: str, layers: int = 2):
    cfg = ModelConfig(
        model_type="llama",
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_layers=layers,
        num_heads=4,
        num_kv_heads=2,
        head_dim=8,
        max_position=2048,
    )
    model = random_model(cfg, seed=zlib.crc32(name.encode()), std=0.3, max_context=1024)
    model.tokenizer, model.name = LineTokenizer(), name
    return model


@pytest.fixture
def tiny_models(monkeypatch):
    """`specchat bench --model NAME` loads a tiny random model of that name (any name but "deep":
    two layers; "deep": eight, for a DFlash drafter reading five distinct target layers)."""
    def load(name, **kw):
        return tiny(name, 8 if name == "deep" else 2)

    monkeypatch.setattr("specchat.options.load_model", load)  # the target
    monkeypatch.setattr("engine.speculation.proposers.draft.proposer.load_model", load)  # a draft model


def bench(tmp_path, capsys, *extra):
    options = (
        "--device cpu --threads 1 --prompts edit --max-new-tokens 6 --k 1 3 --repeats 1 --warmup 0 --no-peers"
    )
    argv = ["bench", *options.split(), "--out", str(tmp_path), *extra]
    assert main(argv) == 0
    return json.loads((tmp_path / "bench.json").read_text()), capsys.readouterr()


def plain_row(rows, r):
    return next(
        p
        for p in rows
        if (p["engine"], p["prompt"], p["sampling"], p["method"])
        == (r["engine"], r["prompt"], r["sampling"], "plain")
    )


def test_bench_json_has_every_figure_and_speedups_come_from_measured_times(tmp_path, capsys, tiny_models):
    results, out = bench(tmp_path, capsys, "--model", "target", "--draft", "draft", "--repeats", "2")

    assert results["schema"] == 1
    assert ENVIRONMENT <= set(results["environment"])
    assert results["environment"]["command"].startswith("specchat bench --device cpu")
    assert results["settings"]["ks"] == [1, 3] and results["settings"]["repeats"] == 2
    assert set(results["settings"]["samplings"]) == {"greedy", "sampled"}
    assert [p["name"] for p in results["prompts"]] == ["edit"] and results["prompts"][0]["tokens"] > 100

    rows = results["rows"]
    expected = {
        (s, m, k)
        for s in ("greedy", "sampled")
        for m, k in [("plain", 0), ("ngram", 1), ("ngram", 3), ("draft", 1), ("draft", 3)]
    }
    assert {(r["sampling"], r["method"], r["k"]) for r in rows} == expected
    for r in rows:
        assert ROW_FIELDS | OUR_FIELDS <= set(r), r["method"]
        assert r["engine"] == SPECCHAT
        assert len(r["decode_s_runs"]) == 2 and all(t > 0 for t in r["decode_s_runs"])
        assert r["decode_s"] == statistics.median(r["decode_s_runs"])
        assert r["decode_tokens"] == r["new_tokens"] - 1 == r["metrics"]["tokens"]
        assert r["tok_s"] == pytest.approx(statistics.median(r["decode_tokens"] / t for t in r["decode_s_runs"]))
        assert r["speedup"] == pytest.approx(r["tok_s"] / plain_row(rows, r)["tok_s"])
        assert r["tokens_per_step"] == pytest.approx(r["decode_tokens"] / r["steps"])
        assert r["transformers_tok_s"] is None  # --no-peers
        # deterministic proposers, float32: the text is plain decoding's, greedy and sampled
        assert r["deterministic"] and r["same_text"] and r["repeats_agree"]
    assert any(r["drafted"] > 0 for r in rows)
    # the draft model reads the prompt off the decode clock, as the target's prefill does
    assert all((r["draft_prefill_ms"] > 0) == (r["method"] != "plain") for r in rows)
    assert {b["method"] for b in results["best"]} == {"ngram", "draft"}

    assert "| prompt | plain tok/s | n-gram | draft draft |" in out.out
    assert (
        "### edit: rename a type throughout the code, sampled (temperature 0.7, top-p 0.8, top-k 20"
        in out.out
    )
    # progress: the engine's warm-up, then 10 jobs of 2 runs
    assert "\n21/21 edit sampled specchat draft k=3\n" in out.err


def test_runs_of_different_lengths_are_each_measured_by_their_own_tokens():
    case = Case(load_prompts(["edit"])[0], "sampled", SamplingParams(max_tokens=257), [1, 2, 3])
    # k "auto" wrote 256 tokens in 0.45 s, then (its text parted from the first's) 119 in 0.21 s:
    # about 570 tok/s both times, not 118 tokens over the median time of the two (362 tok/s)
    runs = iter([Run([0, 1], 9.0, 0.01),  # the engine's untimed warm-up
                 Run(list(range(257)), 0.45, 0.01), Run(list(range(119)), 0.21, 0.01)])
    job = Job(SPECCHAT, case, "draft", "auto", "draft", True, lambda: next(runs))
    (r,) = execute([job], warmup=0, repeats=2)
    assert r["tok_s"] == pytest.approx(statistics.median([256 / 0.45, 118 / 0.21]))
    assert r["repeats_agree"] is False


def test_timed_runs_go_in_rounds_every_row_once_a_round():
    """A drift of the machine's speed spreads over every row: after the warm-ups, each round runs
    every job once."""
    case = Case(load_prompts(["edit"])[0], "greedy", SamplingParams(max_tokens=3), [1, 2, 3])
    order = []

    def job(method):
        def run():
            order.append(method)
            return Run([5, 6, 7], 0.5, 0.1)
        return Job(SPECCHAT, case, method, 2, method, True, run)

    execute([job("a"), job("b")], warmup=1, repeats=3)
    assert order == ["a", "a", "b", "a", "b", "a", "b", "a", "b"]  # engine warm-up, warm-ups, 3 rounds


def test_speedup_and_best_k_are_ratios_of_the_measured_times():
    case = Case(load_prompts(["edit"])[0], "greedy", SamplingParams(max_tokens=5), [1, 2, 3])
    # medians 2.0 and 0.5; the first plain run is the engine's untimed warm-up
    times = {"plain": [60.0, 2.0, 9.0, 1.0], "ngram": [0.5, 0.25, 4.0]}

    def job(method, k, tokens):
        runs = iter(times[method])
        return Job(SPECCHAT, case, method, k, method, True, lambda: Run(tokens, next(runs), 0.1))

    rows = execute([job("plain", 0, [5, 6, 7, 8, 9]), job("ngram", 2, [5, 6, 7, 1, 1])], warmup=0, repeats=3)
    plain, ngram = rows
    assert plain["tok_s"] == 4 / 2.0 and ngram["tok_s"] == 4 / 0.5
    assert ngram["speedup"] == 4.0 and plain["speedup"] == 1.0
    assert ngram["same_text"] is False and plain["same_text"] is True
    assert ngram["first_difference"] == 3 and plain["first_difference"] is None  # where the texts part
    assert best_k(rows) == [
        {
            "engine": SPECCHAT,
            "prompt": "edit",
            "sampling": "greedy",
            "method": "ngram",
            "k": 2,
            "tok_s": 8.0,
            "speedup": 4.0,
            "tokens_per_step": None,
        }
    ]


def test_bench_tables_are_rendered_again_from_the_json(tmp_path, capsys, tiny_models):
    results, out = bench(
        tmp_path / "run", capsys, "--model", "target", "--greedy-only", "--k", "2", "--warmup", "1"
    )
    assert {r["sampling"] for r in results["rows"]} == {"greedy"}
    assert (
        main(["bench", "--from-json", str(tmp_path / "run" / "bench.json"), "--out", str(tmp_path / "again")])
        == 0
    )
    assert capsys.readouterr().out == out.out


def test_runs_split_by_prompt_merge_into_one_table(tmp_path, capsys, tiny_models):
    for name in ("edit", "explain"):
        bench(tmp_path / name, capsys, "--model", "target", "--greedy-only", "--k", "2", "--prompts", name)
    runs = [str(tmp_path / name / "bench.json") for name in ("edit", "explain")]
    assert main(["bench", "--from-json", *runs, "--out", str(tmp_path / "both")]) == 0
    merged = json.loads((tmp_path / "both" / "bench.json").read_text())
    assert [p["name"] for p in merged["prompts"]] == ["edit", "explain"]
    assert {(b["prompt"], b["method"]) for b in merged["best"]} == {("edit", "ngram"), ("explain", "ngram")}
    out = capsys.readouterr().out
    assert "| edit: rename a type throughout the code |" in out and "| explain the code |" in out
    assert main(["bench", "--from-json", runs[0], runs[0], "--out", str(tmp_path / "twice")]) == 1
    assert "measured the same row twice" in capsys.readouterr().err


def test_bench_dflash_rows_with_a_random_drafter_are_labelled_and_exact(tmp_path, capsys, tiny_models):
    results, out = bench(tmp_path, capsys, "--model", "deep", "--dflash", "random", "--k", "2", "15")
    dflash = [r for r in results["rows"] if r["method"] == "dflash"]
    assert {(r["sampling"], r["k"]) for r in dflash} == {
        ("greedy", 2),
        ("greedy", 15),
        ("sampled", 2),
        ("sampled", 15),
    }
    assert all(r["label"] == "DFlash (random weights)" and r["same_text"] for r in dflash)
    assert "random weights" in results["notes"][0]
    assert "DFlash tokens per step" in out.out


def test_bench_rows_with_sampled_drafts_are_held_to_plain_text_only_when_greedy(tmp_path, capsys, tiny_models):
    results, _ = bench(tmp_path, capsys, "--model", "deep", "--dflash", "random", "--k", "2", "--sample-drafts")
    dflash = {r["sampling"]: r for r in results["rows"] if r["method"] == "dflash"}
    assert dflash["greedy"]["deterministic"] and dflash["greedy"]["same_text"]
    assert not dflash["sampled"]["deterministic"]  # its text follows the model's distribution


def test_bench_side_by_side_with_transformers_generate(tmp_path, capsys, monkeypatch):
    """A real transformers peer on a tiny Llama saved to disk: both engines load the same weights,
    so greedy plain decoding gives the same tokens, and every row of ours has its ratio."""
    transformers = pytest.importorskip("transformers")
    dirs = {}
    for name, seed in (("target", 1), ("draft", 2)):
        torch.manual_seed(seed)
        cfg = transformers.LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=2048,
            initializer_range=0.3,
            tie_word_embeddings=False,
        )
        transformers.LlamaForCausalLM(cfg).save_pretrained(tmp_path / name)
        dirs[name] = str(tmp_path / name)
    real_load = engine.load_model

    def load(name, **kw):
        model = real_load(name, **kw)
        model.tokenizer = LineTokenizer()
        return model

    monkeypatch.setattr("specchat.options.load_model", load)
    monkeypatch.setattr("engine.speculation.proposers.draft.proposer.load_model", load)
    # transformers' decode time is its generate's total less a prefill timed apart: enough tokens, after
    # a warm-up, that the difference is the decode and not the timer's noise
    options = "--device cpu --threads 1 --prompts explain --max-new-tokens 24 --k 2 --repeats 1 --warmup 1 --greedy-only"
    argv = [
        "bench",
        "--model",
        dirs["target"],
        "--draft",
        dirs["draft"],
        *options.split(),
        "--out",
        str(tmp_path / "out"),
    ]
    assert main(argv) == 0
    rows = json.loads((tmp_path / "out" / "bench.json").read_text())["rows"]
    theirs = {(r["method"], r["k"]): r for r in rows if r["engine"] == "transformers"}
    assert set(theirs) == {("plain", 0), ("ngram", 2), ("draft", 2), ("draft-heuristic", 2)}
    ours = {(r["method"], r["k"]): r for r in rows if r["engine"] == SPECCHAT}
    assert ours[("plain", 0)]["tokens"] == theirs[("plain", 0)]["tokens"]
    for (method, k), r in ours.items():
        assert r["transformers_tok_s"] == theirs[(method, k)]["tok_s"]
        assert r["ours_over_transformers"] == pytest.approx(r["tok_s"] / r["transformers_tok_s"])
    assert ours[("draft", 2)]["transformers_heuristic_tok_s"] == theirs[("draft-heuristic", 2)]["tok_s"]
    for r in theirs.values():
        assert r["speedup"] == pytest.approx(r["tok_s"] / theirs[("plain", 0)]["tok_s"])
    assert "transformers heuristic tok/s" in capsys.readouterr().out


def test_chart_is_skipped_with_a_note_when_matplotlib_is_missing(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    assert "matplotlib is not installed" in write_chart({"rows": []}, tmp_path / "bench.png")
    assert not (tmp_path / "bench.png").exists()


def test_chart_is_drawn_when_matplotlib_is_there(tmp_path, capsys, tiny_models):
    pytest.importorskip("matplotlib")
    bench(tmp_path, capsys, "--model", "target", "--greedy-only", "--k", "2")
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def compared(tmp_path, capsys, *ks: str) -> list[str]:
    """The rows of `specchat compare`'s table: the target, with n-gram and the draft at these k, on
    a prompt of repeating lines."""
    prompt = tmp_path / "mine.txt"
    prompt.write_text("\n".join(f"line {i % 7}" for i in range(60)))
    options = "--model target --draft draft --device cpu --threads 1 --max-new-tokens 6 --warmup 0"
    assert main(["compare", *options.split(), "--k", *ks, "--prompt-file", str(prompt)]) == 0
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")][1:]


def method_and_k(row: str) -> str:
    """A table row's first two cells: "| n-gram | 4 | ..." -> "n-gram 4"."""
    method, k = row.split(" | ")[:2]
    return f"{method.removeprefix('| ')} {k}"


def test_compare_marks_each_methods_best_k_and_the_fastest_row(tmp_path, capsys, tiny_models):
    table = compared(tmp_path, capsys, "2", "4")
    assert [method_and_k(row) for row in table] == ["plain –", "n-gram 2", "n-gram 4", "draft draft 2", "draft draft 4"]
    assert sum("★ fastest" in line for line in table) == 1
    for method in ("n-gram", "draft draft"):  # each method's best k is marked (or it is the fastest)
        assert sum(("best k" in line or "fastest" in line) for line in table if f"| {method} |" in line) == 1


def test_bench_prompts_are_the_textwrap_source():
    code = source_code()
    assert "class TextWrapper:" in code and "def shorten(" in code and '"""' not in code
    edit, explain = load_prompts()
    assert "LineWrapper" in edit.text and code in edit.text and code in explain.text
    assert edit.title == "edit: rename a type throughout the code"


def test_bad_bench_settings_are_one_line_errors(tmp_path, capsys, tiny_models):
    assert main(["bench", "--model", "target", "--k", "0", "--no-peers", "--out", str(tmp_path)]) == 1
    assert "k must be a whole number from 1 to 15" in capsys.readouterr().err
    assert main(["bench", "--model", "target", "--prompts", "nope.txt", "--out", str(tmp_path)]) == 1
    assert "no prompt 'nope.txt'" in capsys.readouterr().err


def test_bench_files_that_cannot_be_read_or_written_are_one_line_errors(tmp_path, capsys, tiny_models):
    not_json, other_json, blocked = tmp_path / "notes.txt", tmp_path / "other.json", tmp_path / "a-file"
    not_json.write_text("not json")
    other_json.write_text('{"rows": []}')
    blocked.write_text("")
    for path, message in ((tmp_path / "missing.json", "cannot read"), (not_json, "not JSON"),
                          (other_json, "not a bench.json of this version")):
        assert main(["bench", "--from-json", str(path), "--out", str(tmp_path / "out")]) == 1
        assert message in capsys.readouterr().err
    assert main(["bench", "--model", "target", "--no-peers", "--out", str(blocked)]) == 1
    assert "a file is there, not a folder" in capsys.readouterr().err
    fresh = tmp_path / "fresh"
    assert main(["bench", "--model", "target", "--prompts", "nope.txt", "--out", str(fresh)]) == 1
    assert not fresh.exists()  # a bench that did not run leaves no folder behind


def test_a_prompt_file_that_is_not_text_is_a_one_line_error(tmp_path, capsys, tiny_models):
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"\xff\xfe\x00bad")
    assert main(["compare", "--model", "target", "--prompt-file", str(binary)]) == 1
    assert "not UTF-8 text" in capsys.readouterr().err
    assert main(["run", "--model", "target", "--prompt-file", str(binary)]) == 1
    assert "not UTF-8 text" in capsys.readouterr().err


def test_compare_and_bench_report_auto_beside_the_fixed_rows(tmp_path, capsys, tiny_models, monkeypatch):
    monkeypatch.setenv("SPECCHAT_CACHE", str(tmp_path / "cache"))  # the step costs' one-off timing
    table = compared(tmp_path, capsys, "2", "auto")
    assert [method_and_k(row) for row in table] == [
        "plain –", "n-gram 2", "n-gram auto", "draft draft 2", "draft draft auto", "auto: n-gram, draft draft auto",
    ]
    results, _ = bench(tmp_path, capsys, "--model", "target", "--k", "2", "auto", "--greedy-only")
    rows = results["rows"]
    assert {(r["method"], r["k"]) for r in rows} == {("plain", 0), ("ngram", 2), ("ngram", "auto")}
    assert all(r["same_text"] for r in rows)  # auto never changes the output
    assert [(b["method"], b["k"]) for b in results["best"]] == [("ngram", 2)]  # best of the fixed k
    # with a draft model, the auto-proposer row joins the summary table without a column of its own
    _, out = bench(tmp_path / "draft", capsys, "--model", "target", "--draft", "draft", "--k", "2", "auto",
                   "--greedy-only")
    assert "| draft tokens per step |" in out.out


def test_k_auto_on_the_command_line(capsys):
    from specchat.arguments import k_value

    assert k_value("auto") == "auto" and k_value("AUTO") == "auto" and k_value("7") == 7
    with pytest.raises(SystemExit):
        main(["run", "--speculate", "many", "--prompt", "hi"])
    assert "k must be a whole number from 1 to 15 or auto, got 'many'" in capsys.readouterr().err


def test_a_timed_run_captures_every_graph_before_its_clock_starts(model, monkeypatch):
    # k "auto" may choose a step length the row's warm-up run never used: capturing its graph
    # mid-reply would land in the timed steps
    from engine import AUTO, AutoProposer, NgramProposer
    from specchat.bench.runs import timed_generate

    order = []
    monkeypatch.setattr(model, "warm_up", lambda sampling, *a, **kw: order.append(("target", sampling)))
    members = [NgramProposer(k=AUTO), NgramProposer(k=2)]
    for member in members:
        monkeypatch.setattr(member, "warm_up", lambda target, sampling, m=member: order.append((m, sampling)))
    real_step = model.step
    monkeypatch.setattr(model, "step", lambda *a, **kw: order.append("step") or real_step(*a, **kw))
    sampling = SamplingParams(max_tokens=4)
    timed_generate(model, [1, 2, 3, 1, 2], sampling, [], AutoProposer(members))
    assert order[:3] == [("target", sampling), (members[0], sampling), (members[1], sampling)]
    assert "step" in order[3:]


def test_a_timed_run_holds_the_collectors_full_passes_while_its_clock_runs(model, monkeypatch):
    """A full pass over everything loaded can take 100 ms, more than a short row's whole run."""
    import gc

    from specchat.bench.runs import timed_generate
    from specchat.collector import HELD

    before = gc.get_threshold()
    during = []
    real_chain = model.chain
    monkeypatch.setattr(model, "chain", lambda *a, **kw: during.append(gc.get_threshold()[2]) or real_chain(*a, **kw))
    timed_generate(model, [1, 2, 3, 1, 2], SamplingParams(max_tokens=6), [], None)
    assert during and set(during) == {HELD}
    assert gc.get_threshold() == before


def test_bench_json_names_the_engine_switches_it_ran_with(tmp_path, capsys, tiny_models, monkeypatch):
    monkeypatch.setenv("SPECCHAT_DRAFT_AHEAD", "1")
    monkeypatch.setenv("SPECCHAT_CACHE", str(tmp_path / "cache"))
    results, printed = bench(tmp_path, capsys, "--model", "target")
    switches = results["environment"]["switches"]
    assert switches["SPECCHAT_DRAFT_AHEAD"] == "1" and "SPECCHAT_CACHE" not in switches
    command = next(line for line in printed.out.splitlines() if line.startswith("`specchat bench"))
    assert command.endswith("SPECCHAT_DRAFT_AHEAD=1")
