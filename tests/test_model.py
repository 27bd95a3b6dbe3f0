"""Our decoder against transformers' own implementations, loaded through the real loading code."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

from engine import EngineError, ModelConfig, SamplingParams, generate, load_model

SHAPE = dict(
    vocab_size=101, hidden_size=64, intermediate_size=112, num_hidden_layers=3, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=512,
)
FAMILIES = {
    "llama": lambda: LlamaConfig(**SHAPE, tie_word_embeddings=True),
    "qwen2": lambda: Qwen2Config(**SHAPE, tie_word_embeddings=False),
    "qwen3": lambda: Qwen3Config(**SHAPE, head_dim=32, tie_word_embeddings=True),
}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def pair(request, tmp_path_factory):
    """(transformers model, our model) with the same random weights, saved and loaded from disk."""
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(FAMILIES[request.param]()).float().eval()
    for p in hf.parameters():  # spread the weights so greedy choices are never near-ties
        torch.nn.init.normal_(p, 0.0, 0.2) if p.dim() > 1 else torch.nn.init.normal_(p, 1.0, 0.1)
    path = tmp_path_factory.mktemp(request.param)
    hf.save_pretrained(path)
    ours = load_model(str(path), device="cpu", dtype="float32", max_context=512)
    return hf, ours


def test_logits_match_transformers_across_incremental_steps(pair):
    hf, ours = pair
    ids = torch.randint(0, SHAPE["vocab_size"], (40,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(ids[None]).logits[0]
    seq = ours.new_sequence()
    # a prefill, a 16-token verify-sized step, then single decode steps: every path of the cache
    chunks = [ids[:20], ids[20:36], ids[36:37], ids[37:38], ids[38:]]
    got = torch.cat([ours.step(seq, chunk, SamplingParams()).logits for chunk in chunks])
    assert (got - expected).abs().max().item() < 1e-4


def test_greedy_generation_matches_transformers_generate(pair):
    hf, ours = pair
    prompt = [5, 17, 42, 8, 99, 3, 3, 61]
    with torch.no_grad():
        expected = hf.generate(
            torch.tensor([prompt]), max_new_tokens=40, do_sample=False, min_new_tokens=40,
            pad_token_id=0, eos_token_id=None,
        )[0, len(prompt):].tolist()
    got = generate(ours, prompt, SamplingParams(max_tokens=40)).tokens
    assert got == expected


def test_tapped_states_are_the_residual_stream_after_each_chosen_layer(pair):
    hf, ours = pair
    ids = torch.tensor([1, 2, 3, 4, 5])
    with torch.no_grad():
        states = hf(ids[None], output_hidden_states=True).hidden_states  # [embeddings, layer 0, ...]
    ours.state_layers = (0, 2)
    try:
        out = ours.step(ours.new_sequence(), ids, SamplingParams())
    finally:
        ours.state_layers = ()
    h = SHAPE["hidden_size"]
    assert torch.allclose(out.states[:, :h], states[1][0], atol=1e-4)
    # the last layer's entry in hidden_states is after the final norm in transformers; ours is not
    assert out.states.shape == (5, 2 * h)


def test_unsupported_architecture_is_one_clear_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "vocab_size": 10}))
    with pytest.raises(EngineError, match="unsupported architecture 'gpt2'"):
        load_model(str(tmp_path), device="cpu")


def mistral_config(**kw) -> dict:
    return {"model_type": "mistral", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 4096, **kw}


def test_mistral_without_a_sliding_window_is_a_llama_shaped_model():
    cfg = ModelConfig.from_hf(mistral_config(sliding_window=None))
    assert (cfg.model_type, cfg.qkv_bias, cfg.qk_norm) == ("mistral", False, False)


def test_a_sliding_window_is_refused_in_one_clear_line():
    with pytest.raises(EngineError, match="unsupported sliding-window attention \\(1024 tokens\\)"):
        ModelConfig.from_hf(mistral_config(sliding_window=1024))
    # Qwen2's configs name a window they do not use
    assert ModelConfig.from_hf(mistral_config(sliding_window=1024, use_sliding_window=False)).model_type == "mistral"


def test_missing_weights_are_one_clear_error(tmp_path):
    LlamaConfig(**SHAPE).save_pretrained(tmp_path)
    with pytest.raises(EngineError, match="no .safetensors"):
        load_model(str(tmp_path), device="cpu")


@pytest.mark.parametrize("device", ["tpu", "cuda:x", "gpu0"])
def test_unknown_device_is_one_clear_error(device):
    with pytest.raises(EngineError, match="unknown device"):
        load_model("no-such-model", device=device)


def test_unknown_model_name_is_one_clear_error():
    with pytest.raises(EngineError, match="no model 'no-such-model'"):
        load_model("no-such-model", device="cpu")


def test_offline_hub_id_not_in_cache_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(EngineError, match="offline"):
        load_model("someone/not-cached-model", device="cpu")


class CountingTokenizer:
    """Enough of a tokenizer for stop_ids, counting how often its vocabulary is built."""

    eos_token_id = 2

    def __init__(self, vocab: dict[str, int]):
        self.vocab, self.built = vocab, 0

    def get_vocab(self) -> dict[str, int]:
        self.built += 1
        return dict(self.vocab)

    def convert_tokens_to_ids(self, name: str) -> int:
        return self.vocab[name]


def test_stop_ids_build_the_vocabulary_once_per_tokenizer():
    # a chat asks for them at every reply; the vocabulary's dict costs a tenth of a second or more
    from engine import random_model
    from tests.conftest import tiny_config

    model = random_model(tiny_config("qwen2", vocab=32, num_layers=1))
    model.tokenizer = CountingTokenizer({"<|im_end|>": 7, "<|endoftext|>": 5, "a": 9})
    first = model.stop_ids()
    assert {2, 5, 7} <= set(first) and 9 not in first
    assert model.stop_ids() == first and model.tokenizer.built == 1
    model.tokenizer = CountingTokenizer({"<|eot_id|>": 11})  # another tokenizer: asked anew
    assert 11 in model.stop_ids() and 7 not in model.stop_ids() and model.tokenizer.built == 1


def test_a_warm_up_prefill_leaves_no_trace():
    # the pool's pages all come back, and the next reply is the one a fresh model gives (a
    # prompt longer than the context is not tried)
    from engine import random_model
    from tests.conftest import tiny_config

    cfg = tiny_config("qwen2", vocab=64, num_layers=2)
    warmed, fresh = random_model(cfg, seed=3, max_context=1024), random_model(cfg, seed=3, max_context=1024)
    free = len(warmed.pool.free)
    warmed.warm_prefill()
    assert len(warmed.pool.free) == free
    sampling = SamplingParams(temperature=0.8, seed=5, max_tokens=12)
    assert generate(warmed, [1, 2, 3], sampling).tokens == generate(fresh, [1, 2, 3], sampling).tokens


def test_a_warm_up_prefill_runs_once_per_set_of_state_taps(monkeypatch):
    # every timed bench run and every proposer's warm-up asks for it; the kernels compile once
    from engine import random_model
    from tests.conftest import tiny_config

    model = random_model(tiny_config("qwen2", vocab=64, num_layers=2), seed=3, max_context=1024)
    steps = []
    real_step = model.step
    monkeypatch.setattr(model, "step", lambda *a, **kw: steps.append(model.state_layers) or real_step(*a, **kw))
    model.warm_prefill()
    runs = len(steps)
    model.warm_prefill()
    assert runs > 0 and len(steps) == runs
    model.state_layers = (0, 1)
    try:
        model.warm_prefill()
    finally:
        model.state_layers = ()
    assert len(steps) == 2 * runs and steps[-1] == (0, 1)
