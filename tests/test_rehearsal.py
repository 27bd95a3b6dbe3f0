"""The reply rehearsed at load: it drafts with the proposer it is given, and leaves nothing
behind (k as it was, no adaptive estimates, every KV page back in its pool)."""

import pytest

from engine import AUTO, AutoProposer, DraftProposer, NgramProposer, SamplingParams, random_model, rehearse
from tests.conftest import tiny_config

SAMPLINGS = [SamplingParams(), SamplingParams(temperature=0.8, top_p=0.9, seed=3)]


@pytest.mark.parametrize("sampling", SAMPLINGS)
@pytest.mark.parametrize("k", [3, AUTO])
def test_the_n_gram_proposer_drafts_and_its_k_and_estimates_are_left_as_they_were(target, sampling, k):
    proposer = NgramProposer(k=k)
    free = target.pool.num_free
    assert rehearse(target, proposer, sampling) > 0
    assert proposer.k == k
    assert proposer.estimates is None
    assert target.pool.num_free == free


def test_a_draft_model_drafts_and_gives_its_pages_back(target, draft):
    proposer = DraftProposer(draft, k=2)
    free, draft_free = target.pool.num_free, draft.pool.num_free
    assert rehearse(target, proposer, SamplingParams()) > 0
    assert proposer.k == 2
    assert (target.pool.num_free, draft.pool.num_free) == (free, draft_free)


def test_proposer_auto_forgets_what_its_members_learnt(target, draft):
    members = [NgramProposer(k=AUTO), DraftProposer(draft, k=AUTO)]
    rehearse(target, AutoProposer(members), SamplingParams())
    assert [m.estimates for m in members] == [None, None]


def test_plain_decoding_drafts_nothing(target):
    free = target.pool.num_free
    assert rehearse(target, None, SamplingParams()) == 0
    assert target.pool.num_free == free


def test_a_context_too_small_for_the_rehearsal_skips_it():
    small = random_model(tiny_config("qwen2"), seed=1, max_context=64)
    proposer = NgramProposer(k=3)
    assert rehearse(small, proposer, SamplingParams()) == 0
    assert proposer.k == 3
