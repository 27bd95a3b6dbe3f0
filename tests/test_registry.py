"""The proposer registry: a proposer declared in one place appears everywhere proposers are listed."""

from __future__ import annotations

from argparse import Namespace

import pytest

import engine
from engine import EngineError, Need, Proposal, Proposer, ProposerSpec, generate, register, unregister
from specchat.__main__ import parser
from specchat.bench.runs import method_order, methods
from specchat.session import ChatSession
from specchat.widgets.help import keys, proposers
from tests.conftest import tiny_model


class RepeatProposer(Proposer):
    """Drafts the last token again, k times: a throwaway proposer no front end knows of."""

    name = "repeat"
    max_k = 6

    def propose(self, context, k):
        return Proposal([context[-1]] * k)


@pytest.fixture
def repeat():
    spec = register(ProposerSpec(
        name="repeat", label="repeat", summary="drafts the last token again",
        need=Need("repeat-source", "WHAT", "what to repeat", "no --repeat-source given"),
        load=lambda target, options: options.sources["repeat-source"],
        make=lambda loaded, k: RepeatProposer(k), max_k=lambda loaded: 6, order=15,
    ))
    yield spec
    unregister("repeat")


def test_a_registered_proposer_appears_in_every_front_end(repeat):
    # run, the chat, compare and bench take its need and its name on the command line
    args = parser().parse_args(["run", "--proposer", "repeat", "--repeat-source", "x", "--prompt", "hi"])
    assert (args.proposer, args.repeat_source) == ("repeat", "x")
    assert parser().parse_args(["bench", "table", "--repeat-source", "x"]).repeat_source == "x"
    assert parser().parse_args(["compare", "--prompt-file", "f", "--repeat-source", "x"]).repeat_source == "x"
    # the chat offers it once its need is given, in registry order, and builds it
    session = ChatSession(Namespace(model="m", repeat_source="x"), model=tiny_model())
    assert session.proposer_names() == ["off", "n-gram", "repeat"]
    assert session.proposer("repeat", 99).k == 6  # clamped to its own max_k
    assert "repeat" not in ChatSession(Namespace(model="m"), model=tiny_model()).proposer_names()
    # the help screen lists it, with its summary
    assert "drafts the last token again" in proposers().plain
    assert "off, n-gram, repeat, draft, DFlash" in keys().plain
    # compare and bench build its rows (k past its max_k skipped) and order them
    loaded = engine.load_proposer("repeat", tiny_model(), engine.ProposerOptions({"repeat-source": "x"}))
    rows = methods([2, 7], [loaded])
    assert [(m.name, m.k) for m in rows] == [("plain", 0), ("repeat", 2)]
    assert method_order().index("repeat") == method_order().index("ngram") + 1


def test_a_registered_proposer_keeps_the_output_exact(repeat):
    model = tiny_model()
    ids = [1, 2, 3, 4, 5]
    plain = generate(model, ids, engine.SamplingParams(max_tokens=30)).tokens
    spec = engine.load_proposer("repeat", model, engine.ProposerOptions({"repeat-source": "x"}))
    assert generate(model, ids, engine.SamplingParams(max_tokens=30), speculative=spec.make(4)).tokens == plain


def test_a_need_not_given_is_one_clear_error(repeat):
    with pytest.raises(EngineError, match="repeat needs --repeat-source WHAT"):
        engine.load_proposer("repeat", tiny_model(), engine.ProposerOptions({}))
    with pytest.raises(EngineError, match="no proposer 'nope'"):
        engine.find_spec("nope")


def test_k_beyond_a_proposers_own_limit_is_refused(repeat):
    loaded = engine.load_proposer("repeat", tiny_model(), engine.ProposerOptions({"repeat-source": "x"}))
    with pytest.raises(EngineError, match="from 1 to 6"):
        loaded.make(7)


def test_the_chats_draft_model_honours_eager(tmp_path, monkeypatch):
    seen = {}

    def fake_load(name, **kw):
        seen.update(kw)
        return tiny_model()

    monkeypatch.setattr("engine.speculation.proposers.draft.proposer.load_model", fake_load)
    args = Namespace(model="m", draft="some-draft", eager=True)
    session = ChatSession(args, model=tiny_model())
    session.proposer("draft", 4, progress=lambda text: None)
    assert seen["eager"] is True
