"""A draft model that sat steps out catches up on the tokens it missed: how far behind it says it
is, how it runs the catch-up, and how the adaptive policy accounts for it in a real generation."""

import pytest

from engine import AUTO, DraftProposer, Generation, SamplingParams, generate
from engine.speculation.adaptive import AdaptivePolicy, Choice, catch_up_key
from engine.speculation.step_costs import CostTable

PROMPT = [3, 14, 15, 9, 26, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8]
# per step: k drafts, 0 a plain step
SCRIPT = [2, 0, 0, 0, 3, 3] + [0] * 20 + [2, 1] + [0] * 40 + [4, 2]


class Scripted(AdaptivePolicy):
    """The real policy's bookkeeping (record) on steps a script chooses; what the draft model
    says of how far behind it is, asked before each step, is kept."""

    def __init__(self, model):
        super().__init__(model, lambda m: CostTable(lambda n: 1e-3))
        self.steps, self.behind = 0, []

    def choose(self, proposers, context, limit):
        draft = proposers[0]
        k = min(SCRIPT[self.steps % len(SCRIPT)], limit)
        self.steps += 1
        self.behind.append(draft.behind(context))
        self.estimates(draft)
        if not k:
            return Choice(None, 0, plain_seconds=1e-3)
        behind = self.behind[-1]
        return Choice(draft, k, plain_seconds=1e-3, behind=behind, prompt=behind >= len(context) - 1)


def scripted_reply(target, draft_model):
    proposer = DraftProposer(draft_model, k=AUTO)
    policy = Scripted(target)
    gen = Generation(target, PROMPT, SamplingParams(max_tokens=len(SCRIPT)), speculative=proposer, policy=policy)
    steps = list(gen)[1:]
    return gen, steps, policy, proposer


def test_a_draft_model_is_behind_by_the_tokens_it_missed(target):
    _, steps, policy, _ = scripted_reply(target, target)  # a draft identical to the target: every draft kept
    assert policy.behind[0] == len(PROMPT)  # its first proposal reads the prompt and the first token
    missed = 0
    for step, behind in zip(steps, policy.behind):
        if step is not steps[0]:
            assert behind == missed
        # after a step it drafted, all kept, the last draft and the bonus are new to it; a plain
        # step's token is one more
        missed = 1 if step.k else missed + len(step.tokens)


def test_the_catch_up_is_charged_to_catching_up_never_to_drafting(target, draft):
    gen, steps, policy, proposer = scripted_reply(target, draft)
    assert gen.tokens == generate(target, PROMPT, SamplingParams(max_tokens=len(SCRIPT))).tokens
    est = proposer.estimates
    drafted = [(s, b) for s, b in zip(steps, policy.behind) if s.k]
    assert drafted[0][1] == len(PROMPT)  # the first proposal read the prompt: its prefill
    in_run = [s for s, b in drafted[1:] if b <= 1]
    back = [(s, b) for s, b in drafted[1:] if b > 1]
    assert in_run and len(back) >= 2
    # the in-run proposals, and only those, timed drafting; each return timed a catch-up
    assert set(est.drafting.measured) == {s.k for s in in_run}
    assert set(est.catch_up.measured) == {catch_up_key(b) for _, b in back}


@pytest.mark.parametrize("missed", [15, 16, 40])
def test_with_cuda_graphs_a_catch_up_runs_as_graph_sized_steps(target, draft, missed):
    lengths = []
    graphed = Graphed(draft, lengths)
    proposer = DraftProposer(graphed, k=3)
    proposer.attach(target, SamplingParams())
    context = PROMPT + [1]
    proposer.propose(context, 3)
    lengths.clear()
    proposer.propose(context + [2] * missed, 3)
    # the new tokens only: the context's last token ran in the proposal before
    assert lengths == [16] * (missed // 16) + ([missed % 16] if missed % 16 else [])


class Graphed:
    """The model as a draft model with CUDA graphs sees it: the step lengths it runs are kept."""

    graphs = True

    def __init__(self, model, lengths):
        self._model, self._lengths = model, lengths

    def __getattr__(self, name):
        return getattr(self._model, name)

    def step(self, seq, ids, *args, **kwargs):
        self._lengths.append(len(ids))
        return self._model.step(seq, ids, *args, **kwargs)


def test_without_cuda_graphs_a_catch_up_is_one_step(draft, target):
    lengths = []
    proposer = DraftProposer(Recorded(draft, lengths), k=3)
    proposer.attach(target, SamplingParams())
    proposer.propose(PROMPT + [1], 3)
    lengths.clear()
    proposer.propose(PROMPT + [1] + [2] * 40, 3)
    assert lengths == [40]


class Recorded(Graphed):
    graphs = None
