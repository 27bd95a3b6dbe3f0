"""Long work shows Rich's progress bars on a terminal and plain lines in a log."""

from __future__ import annotations

import io

from rich.console import Console

from specchat import progress as progress_module
from specchat.progress import fraction, message_progress, run_progress


def terminal(monkeypatch) -> io.StringIO:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    monkeypatch.setattr(progress_module, "stderr_console", lambda: console)
    return out


def test_the_last_count_in_a_message_is_its_fraction():
    assert fraction("coder: fetching wheel-2 (2/3)") == (2, 3)
    assert fraction("dequantising tensors: 17 / 290") == (17, 290)
    assert fraction("model.gguf: reading") is None
    assert fraction("0/0 tensors") is None


def test_counted_messages_draw_a_bar_on_a_terminal(monkeypatch):
    out = terminal(monkeypatch)
    with message_progress() as show:
        show("pack: fetching wheel (1/4)")
        show("pack: fetching wheel (3/4)")
    drawn = out.getvalue()
    assert "3/4" in drawn and "━" in drawn


def test_in_a_log_each_message_is_one_line(capsys):
    with message_progress() as show:
        show("pack: fetching wheel (1/2)")
        show("pack: checked")
    assert capsys.readouterr().err.splitlines() == ["pack: fetching wheel (1/2)", "pack: checked"]


def test_runs_fill_the_bar_on_a_terminal(monkeypatch):
    out = terminal(monkeypatch)
    with run_progress(3) as tick:
        for label in ("a", "b", "c"):
            tick(f"run {label}")
    assert "3/3" in out.getvalue()


def test_in_a_log_runs_are_reported_at_the_start_and_every_tenth(capsys):
    with run_progress(40) as tick:
        for i in range(40):
            tick(f"run {i}")
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "1/40 run 0" and lines[-1] == "40/40 run 39"
    assert len(lines) == 11
