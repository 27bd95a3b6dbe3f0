"""Stats export: the reply's and the session's figures as JSON and CSV under vLLM's metric names."""

from __future__ import annotations

import csv
import json

from engine import Metrics, Step
from specchat.__main__ import main
from specchat.app import make_app
from specchat.settings import Settings
from specchat.stats_file import stats_paths, write_stats
from tests.pilot import ask, chat, pilot_test, recorded_notes, say, until
from tests.scripted import ScriptedSession

VLLM_NAMES = {
    "vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos", "mean_acceptance_length", "draft_acceptance_rate",
    "per_position_acceptance_rate", "accepted_per_step_histogram",
    "spec_decode_drafting_time_s", "spec_decode_verify_time_s",
}


def three_steps() -> Metrics:
    m = Metrics()
    m.add(Step([5, 6, 7], [5, 6, 8], 2, "correction", 3, "n-gram", 0.001, 0.010, 10))  # 2 of 3 kept
    m.add(Step([9, 1, 2, 3], [9, 1, 2], 3, "bonus", 3, "n-gram", 0.001, 0.010, 13))  # all 3 kept
    m.add(Step([4], [], 0, "plain", 0, "off", 0.0, 0.008, 17))  # no drafts: not one of vLLM's "drafts"
    return m


def test_the_figures_follow_vllm_s_definitions():
    v = three_steps().vllm()
    assert v["vllm:spec_decode_num_drafts"] == 2
    assert v["vllm:spec_decode_num_draft_tokens"] == 6
    assert v["vllm:spec_decode_num_accepted_tokens"] == 5
    assert v["vllm:spec_decode_num_accepted_tokens_per_pos"] == [2, 2, 1]
    assert v["mean_acceptance_length"] == 1 + 5 / 2  # per drafting step, the bonus included
    assert v["per_position_acceptance_rate"] == [1.0, 1.0, 0.5]
    assert v["accepted_per_step_histogram"] == {"0": 1, "2": 1, "3": 1}
    assert abs(v["spec_decode_verify_time_s"] - 0.028) < 1e-12


def test_json_and_csv_carry_the_same_figures(tmp_path):
    m = three_steps()
    json_path, csv_path = write_stats(tmp_path / "figures.json", {"reply": m, "session": m})
    assert (json_path.name, csv_path.name) == ("figures.json", "figures.csv")
    data = json.loads(json_path.read_text())
    assert VLLM_NAMES <= set(data["reply"]) and data["session"] == data["reply"]
    rows = list(csv.DictReader(csv_path.open()))
    per_pos = [r for r in rows if r["scope"] == "reply" and r["metric"] == "per_position_acceptance_rate"]
    assert [(r["position"], float(r["value"])) for r in per_pos] == [("1", 1.0), ("2", 1.0), ("3", 0.5)]
    assert {r["metric"] for r in rows} >= VLLM_NAMES


def test_a_name_without_suffix_gets_both(tmp_path):
    assert stats_paths(tmp_path / "a") == (tmp_path / "a.json", tmp_path / "a.csv")
    assert stats_paths(tmp_path / "a.csv") == (tmp_path / "a.json", tmp_path / "a.csv")


def test_run_stats_writes_the_reply_s_figures(gguf, tmp_path, capsys):
    status = main(["run", "--model", gguf, "--raw", "--prompt", "ab ab ab ab", "--speculate", "3",
                   "--max-tokens", "12", "--stats", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert status == 0, err
    data = json.loads((tmp_path / "run.json").read_text())
    reply = data["reply"]
    assert reply["num_output_tokens"] == 11  # the prefill made the first of the 12
    assert reply["vllm:spec_decode_num_draft_tokens"] >= reply["vllm:spec_decode_num_accepted_tokens"]
    assert (tmp_path / "run.csv").read_text().startswith("scope,metric,position,value\n")


def test_run_stats_to_a_path_it_cannot_write_is_one_line(gguf, tmp_path, capsys):
    (tmp_path / "a-file").write_text("")
    status = main(["run", "--model", gguf, "--prompt", "hi", "--max-tokens", "2",
                   "--stats", str(tmp_path / "a-file" / "x")])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert status == 1 and err[-1].startswith("specchat: cannot write the figures to ")


@pilot_test
async def test_slash_stats_writes_the_reply_and_the_session(home, tmp_path):
    app = make_app(ScriptedSession(accepts=[2, 4, 0]), Settings(proposer="n-gram", k=4), save=False)
    async with chat(app) as pilot:
        await ask(pilot, "one")
        await ask(pilot, "two")
        notes = recorded_notes(app)
        await say(pilot, f"/stats {tmp_path}/chat")
        await until(pilot, lambda: (tmp_path / "chat.csv").exists(), "the figures")
        data = json.loads((tmp_path / "chat.json").read_text())
        assert data["reply"]["vllm:spec_decode_num_accepted_tokens"] == app.stats.reply.accepted
        assert data["session"]["num_output_tokens"] == app.stats.session.tokens > data["reply"]["num_output_tokens"]
        assert data["about"]["proposer"] == "n-gram"
        assert any("figures written" in note for note in notes)
