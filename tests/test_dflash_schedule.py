"""The drafter's learning-rate schedule, the warm-up as train-dflash takes it, and the values it refuses."""

import pytest

from engine.speculation.proposers.dflash.training.schedule import learning_rate
from specchat.__main__ import main


def test_the_warm_up_climbs_linearly_to_the_peak_then_a_cosine_falls_to_a_tenth():
    peak, warmup = 6e-4, 4
    assert [learning_rate(s, 0.0, peak, warmup) for s in range(warmup)] == pytest.approx(
        [peak / 4, peak / 2, 3 * peak / 4, peak])
    assert learning_rate(warmup, 0.0, peak, warmup) == pytest.approx(peak)
    assert learning_rate(warmup + 1, 0.5, peak, warmup) == pytest.approx(0.55 * peak)
    assert learning_rate(warmup + 2, 1.0, peak, warmup) == pytest.approx(0.1 * peak)
    assert learning_rate(warmup + 3, 1.7, peak, warmup) == pytest.approx(0.1 * peak)  # a run past its budget


def test_no_warm_up_starts_at_the_peak():
    assert learning_rate(0, 0.0, 1e-3, 0) == pytest.approx(1e-3)


def test_the_warm_up_gamma_and_vocabulary_given_reach_the_training_settings(tmp_path, monkeypatch):
    from specchat import cli_train

    seen = {}

    def stop(args, progress):  # the settings are made before the target loads: stop there
        raise cli_train.EngineError("stopped before loading")

    monkeypatch.setattr(cli_train, "load_target", stop)
    monkeypatch.setattr(cli_train, "TrainSettings", lambda **kw: seen.update(kw))
    assert main(["train-dflash", "--model", str(tmp_path / "none.gguf"), "--device", "cpu", "--prompts", "p",
                 "--replies", "r", "--out", str(tmp_path / "d"), "--warmup-steps", "150", "--gamma", "4",
                 "--draft-vocab", "4096"]) == 1
    assert seen["warmup_steps"] == 150 and seen["gamma"] == 4.0 and seen["draft_vocab"] == 4096


def test_a_negative_warm_up_is_refused_in_one_line(tmp_path, capsys):
    assert main(["train-dflash", "--model", str(tmp_path / "none.gguf"), "--device", "cpu", "--prompts", "p",
                 "--replies", "r", "--out", str(tmp_path / "d"), "--warmup-steps", "-5"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "--warmup-steps must be at least 0, got -5" in err.splitlines()[-1]


@pytest.mark.parametrize(("option", "value", "says"), [
    ("--steps", "0", "--steps must be at least 1, got 0"),
    ("--learning-rate", "-1", "--learning-rate must be a positive number, got -1.0"),
    ("--learning-rate", "nan", "--learning-rate must be a positive number, got nan"),
    ("--minutes", "-5", "--minutes must be a positive number, got -5.0"),
    ("--stop-after", "0", "--stop-after must be a positive number, got 0.0"),
    ("--checkpoint-minutes", "0", "--checkpoint-minutes must be a positive number, got 0.0"),
    ("--max-length", "8", "--max-length must be at least 64 tokens"),
    ("--gamma", "0", "--gamma must be a positive number, got 0.0"),
])
def test_values_that_would_train_nothing_are_refused_before_the_target_loads(tmp_path, capsys, monkeypatch,
                                                                              option, value, says):
    from specchat import cli_train

    def never(args, progress):
        raise AssertionError("the target loaded before the values were checked")

    monkeypatch.setattr(cli_train, "load_target", never)
    assert main(["train-dflash", "--model", "smollm2-135m", "--device", "cpu", "--prompts", "p",
                 "--replies", "r", "--out", str(tmp_path / "d"), option, value]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and says in err.splitlines()[-1]
