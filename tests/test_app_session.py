"""A scripted engine for the app's tests, and the chat's engine-side pieces it stands in for.

ScriptedSession replaces the model with a script: each step accepts a known number of drafts,
so a test knows which token is an accepted draft, a bonus or a correction. Like the real
Generation, it reads `speculative` (and the proposer's k) afresh at every step and honours
`cancel()` at the next one."""

from __future__ import annotations

import os
import threading
from argparse import Namespace
from types import SimpleNamespace

from engine import Metrics, NgramProposer, Proposer, Step
from specchat.messages import ReplyDone, StepDone
from specchat.session import ChatSession, Detokenizer
from specchat.settings import ChatRecord, Settings, config_dir
from specchat.widgets.panel import Stats

WORDS = (
    "The",
    " quick",
    " brown",
    " fox",
    " jumps",
    " over",
    " the",
    " lazy",
    " dog",
    " and",
    " runs",
    " far",
    " away",
    " into",
    " the",
    " green",
    " hills",
    " where",
    " it",
    " sleeps",
    ".",
)
REFUSED = len(WORDS)  # the token every wrong draft guesses
EOS = REFUSED + 1
VOCAB = (*WORDS, " cat", "")


class ScriptedDraft(Proposer):
    name = "draft"

    def propose(self, context, k):
        raise AssertionError("the scripted generation never asks a proposer for drafts")


class ScriptedGeneration:
    """Emits WORDS then EOS; a step with a proposer of k accepts accepts[i] drafts (capped at k)."""

    def __init__(self, speculative, accepts: list[int], gate: threading.Semaphore | None):
        self.speculative = speculative
        self.accepts = accepts
        self.gate = gate
        self.metrics = Metrics()
        self.tokens: list[int] = []
        self._cancel = threading.Event()

    def cancel(self) -> None:
        self._cancel.set()

    def wait_for_turn(self) -> None:
        while self.gate is not None and not self.gate.acquire(timeout=0.01):
            if self._cancel.is_set():
                return

    def __iter__(self):
        text = [*range(len(WORDS)), EOS]
        pos = 1
        yield self._emit(Step([0], [], 0, "plain", 0, "off", 0.0, 0.02, 3, prefill=True))
        i = 0
        while pos < len(text):
            self.wait_for_turn()
            if self._cancel.is_set():
                yield self._emit(Step([], [], 0, "plain", 0, "off", 0.0, 0.0, pos + 3, finished="cancelled"))
                return
            proposer = self.speculative
            if proposer is None:
                step = Step([text[pos]], [], 0, "plain", 0, "off", 0.0, 0.010, pos + 3)
            else:
                k = proposer.k
                accepted = min(self.accepts[i % len(self.accepts)], k, len(text) - pos - 1)
                drafts = text[pos : pos + accepted] + [REFUSED] * (k - accepted)
                kind = "bonus" if accepted == k else "correction"
                step = Step(
                    text[pos : pos + accepted + 1],
                    drafts,
                    accepted,
                    kind,
                    k,
                    proposer.name,
                    0.001,
                    0.012,
                    pos + 3,
                )
            i += 1
            pos += len(step.tokens)
            if step.tokens[-1] == EOS:
                step.finished = "stop"
            yield self._emit(step)

    def _emit(self, step: Step) -> Step:
        self.tokens += step.tokens
        self.metrics.add(step)
        return step


class ScriptedSession(ChatSession):
    """A ChatSession whose model is the script. `stepwise`: each step waits for `release()`."""

    def __init__(self, accepts=(2, 4, 0, 1), stepwise: bool = False):
        super().__init__(Namespace(model="scripted", draft="scripted-draft", dflash=None))
        self.accepts = list(accepts)
        self.stepwise = stepwise
        self.gate = threading.Semaphore(0)
        self.prompts: list[list[dict]] = []

    @property
    def label(self) -> str:
        return "scripted · cpu"

    def load(self, progress) -> str:
        progress("reading the script")
        self.model = SimpleNamespace(name="scripted")
        return self.label

    def _build(self, name, progress):
        if name == "draft":
            progress("draft 100%")
            return ScriptedDraft(k=4)
        return super()._build(name, progress)

    def prompt_ids(self, history, system):
        self.prompts.append(history)
        return [1, 2, 3]

    def stream(self, ids, sampling, proposer):
        return ScriptedGeneration(proposer, self.accepts, self.gate if self.stepwise else None)

    def decode(self, ids):
        return "".join(VOCAB[i] for i in ids)

    def detokenizer(self) -> Detokenizer:
        return Detokenizer(self.decode, {EOS})

    def release(self, steps: int = 1) -> None:
        for _ in range(steps):
            self.gate.release()


def test_a_reply_runs_as_one_message_per_step_then_reply_done():
    session = ScriptedSession(accepts=[2])
    session.load(print)
    posted = []
    session.run_reply(7, session.stream([1], None, NgramProposer(k=3)), posted.append)
    steps = [m for m in posted if isinstance(m, StepDone)]
    assert isinstance(posted[-1], ReplyDone) and posted[-1].finished == "stop"
    assert [s.step.kind for s in steps[1:3]] == ["correction", "correction"]
    assert "".join(p for s in steps for p in s.pieces) == "".join(WORDS)
    assert steps[1].refused == " cat"  # the draft refused at the correction


def test_detokenizer_holds_back_a_split_character_until_it_is_complete():
    pieces = {1: b"caf", 2: b"\xc3", 3: b"\xa9", 4: b"!"}  # "café!" with é split over two tokens

    def decode(ids):
        return b"".join(pieces[i] for i in ids).decode("utf-8", errors="replace")

    detok = Detokenizer(decode, skip={9})
    assert [detok.add(t) for t in (1, 2, 3, 4, 9)] == ["caf", "", "é", "!", ""]


def test_settings_round_trip_and_ignore_bad_values(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    Settings(temperature=0.7, k=6, system="be brief").save()
    assert Settings.load() == Settings(temperature=0.7, k=6, system="be brief")
    (config_dir() / "settings.json").write_text('{"temperature": "hot", "top_k": 5}')
    assert Settings.load() == Settings(top_k=5)


def test_transcript_is_saved_whole_and_exports_as_markdown(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    record = ChatRecord(model="m", messages=[{"role": "user", "content": "hi"}])
    path = record.save()
    assert path.parent == tmp_path / "data" / "transcripts"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind
    md = record.export(tmp_path / "chat.md").read_text()
    assert "## You\n\nhi" in md
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "chat.md").stat().st_mode & 0o777 == 0o666 & ~umask  # as a plain write leaves it
    assert path.stat().st_mode & 0o777 == 0o600  # the transcript stays the user's alone


def test_speedup_waits_for_a_timed_plain_step():
    stats = Stats()
    stats.add(Step([5, 6, 7], [5, 6, 8], 2, "correction", 3, "n-gram", 0.0, 0.010, 10))
    assert stats.speedup(stats.session) is None
    stats.add(Step([9], [], 0, "plain", 0, "off", 0.0, 0.010, 13))
    # 4 tokens in 20 ms against 10 ms per plain step: twice as fast
    assert abs(stats.speedup(stats.session) - 2.0) < 1e-9


def test_command_line_options_override_saved_settings(tmp_path, monkeypatch):
    from specchat.__main__ import parser
    from specchat.app import settings_from

    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    Settings(temperature=0.7, proposer="off", k=3).save()
    kept, flags = settings_from(parser().parse_args(["chat"]))
    assert (kept.temperature, kept.proposer, kept.k) == (0.7, "off", 3) and flags == {}
    given, flags = settings_from(parser().parse_args(["chat", "--speculate", "6", "--temperature", "0"]))
    assert (given.temperature, given.proposer, given.k) == (0.0, "n-gram", 6)
    assert flags == {"temperature": 0.0, "proposer": "n-gram", "k": 6}
