"""Speculation on real weights: SmolLM2-135M in CI, the Qwen2.5-Coder pair as a slow check."""

import pytest

from engine import MAX_K, DraftProposer, NgramProposer, SamplingParams, generate, load_model
from specchat.bench.prompts import builtin_prompts


@pytest.fixture(scope="module")
def smollm2():
    return load_model("smollm2-135m", device="cpu", dtype="float32", max_context=1024)


def chat(model, text):
    return model.encode_chat([{"role": "user", "content": text}])


def test_smollm2_greedy_speculation_equals_plain_for_every_k(smollm2):
    ids = chat(smollm2, "Repeat this list three times: red, green, blue, yellow, red, green, blue.")
    sampling = SamplingParams(max_tokens=40)
    stops = smollm2.stop_ids()
    expected = generate(smollm2, ids, sampling, stops).tokens
    for k in range(1, MAX_K + 1):
        assert generate(smollm2, ids, sampling, stops, NgramProposer(k=k)).tokens == expected, f"n-gram k={k}"
    for k in range(1, MAX_K + 1):  # the model drafting for itself: every draft must be accepted
        result = generate(smollm2, ids, sampling, stops, DraftProposer(smollm2, k=k))
        assert result.tokens == expected, f"draft k={k}"
        assert result.metrics.draft_acceptance_rate == 1.0


def test_smollm2_sampled_ngram_equals_plain_sampled(smollm2):
    ids = chat(smollm2, "List the days of the week, then list them again.")
    sampling = SamplingParams(temperature=0.8, top_p=0.95, top_k=40, seed=3, max_tokens=40)
    expected = generate(smollm2, ids, sampling, smollm2.stop_ids()).tokens
    for k in (2, 7, 15):
        assert generate(smollm2, ids, sampling, smollm2.stop_ids(), NgramProposer(k=k)).tokens == expected


@pytest.mark.slow
def test_coder_rename_prompt_ngram_takes_several_tokens_per_step_and_equals_plain():
    target = load_model("qwen2.5-coder-1.5b", device="cpu", dtype="float32", max_context=4096)
    ids = chat(target, builtin_prompts()["edit"].text)  # rename TextWrapper to LineWrapper
    sampling = SamplingParams(max_tokens=64)
    plain = generate(target, ids, sampling, target.stop_ids())
    spec = generate(target, ids, sampling, target.stop_ids(), NgramProposer(k=7))
    assert spec.tokens == plain.tokens
    assert spec.metrics.mean_acceptance_length > 1.0
    draft = load_model("qwen2.5-coder-0.5b", device="cpu", dtype="float32", max_context=4096)
    assert generate(target, ids, sampling, target.stop_ids(), DraftProposer(draft, k=4)).tokens == plain.tokens
