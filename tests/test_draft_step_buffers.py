"""A draft model's step outputs may be buffers that its next step or chain overwrites.

On CUDA a step's tokens and logits are a graph's static outputs, and every graph of a model is
captured into one shared memory pool: the chain graph's replays can write where an earlier
step graph keeps its outputs. This CPU model does the same on purpose, so a proposer that reads
a step's outputs after the chain has run draws other drafts than one that reads them in time.
"""

import pytest
import torch

from engine import DraftProposer, SamplingParams, generate
from engine.runtime.model import Model
from engine.runtime.sampling import TOKEN
from engine.runtime.step_io import StepOutput
from tests.conftest import tiny_model

PROMPT = [5, 9, 2, 7, 5, 9, 2, 7, 1, 3, 5, 9, 2, 7, 5, 9]


class SharedOutputs:
    """A model whose step and chain outputs live in one set of buffers, overwritten by every
    later step and by every link of a chain (the worst a shared graph pool may do)."""

    def __init__(self, model: Model):
        self.model = model
        self.tokens = torch.zeros(16, dtype=torch.long)
        self.logits = torch.zeros(16, model.config.vocab_size)

    def __getattr__(self, name):
        return getattr(self.model, name)

    def step(self, seq, ids, sampling, last_only=False, noise=TOKEN) -> StepOutput:
        out = self.model.step(seq, ids, sampling, last_only, noise)
        t = out.tokens.shape[0]
        self.tokens[:t].copy_(out.tokens)
        self.logits[:t].copy_(out.logits)
        return StepOutput(self.tokens[:t], self.logits[:t], out.states)

    def chain(self, seq, first, n, sampling, noise=TOKEN) -> StepOutput:
        tokens, logits = [], []
        token = first
        for _ in range(n):  # each link lands where the step before it left its outputs
            out = self.step(seq, token, sampling, last_only=True, noise=noise)
            token = out.tokens.clone()
            tokens.append(token)
            logits.append(out.logits.clone())
        return StepOutput(torch.cat(tokens), torch.cat(logits))


@pytest.mark.parametrize("sample", [False, True])
def test_drafts_and_q_are_taken_from_the_step_before_the_chain_overwrites_it(sample):
    target, draft = tiny_model("qwen3", seed=3), tiny_model("qwen3", seed=4)
    sampling = SamplingParams(temperature=0.8, seed=11, max_tokens=30)
    proposers = [DraftProposer(m, k=4, sample=sample) for m in (SharedOutputs(draft), draft)]
    shared, fresh = (generate(target, PROMPT, sampling, speculative=p) for p in proposers)
    assert [s.drafts for s in shared.steps] == [s.drafts for s in fresh.steps]
    assert shared.tokens == fresh.tokens


def test_a_drafting_step_leaves_the_drafts_it_read_back_on_the_proposal():
    """The step's one copy to the host (drafts and verified tokens together) leaves the list on the
    proposal, so the draft model's next rewind, which reads it, waits for no copy of its own (on
    CUDA, a second wait for the device each step)."""
    from engine import Generation

    proposer = DraftProposer(tiny_model("qwen3", seed=4), k=4)
    steps = iter(Generation(tiny_model("qwen3", seed=3), PROMPT, SamplingParams(max_tokens=20), speculative=proposer))
    next(steps)  # the prefill
    step = next(steps)
    assert len(step.drafts) == 4
    assert proposer.last._drafts == step.drafts  # read back with the step, not copied again later
