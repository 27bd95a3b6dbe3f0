"""GGUF loading.

* The SmolLM2 pack, loaded through our engine, continues a prompt exactly as transformers does
  from the same GGUF file (its own dequantisation and its own Llama).
* A tiny GGUF written the way llama.cpp's converter writes it (Llama Q/K rows interleaved) loads
  to transformers' logits: the un-permutation is right, and Qwen2 / Qwen3 files are left alone.
* Bad files and names give one EngineError line.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGUFReader
from transformers import AutoModelForCausalLM, AutoTokenizer

from engine import EngineError, SamplingParams, generate, load_model
from engine.loading import packs
from engine.loading.gguf_file import read_gguf
from tests.tiny_gguf import tiny_hf_model, write_gguf

PROMPT = [{"role": "user", "content": "Explain in detail how a steam engine works."}]
LOGITS_BOUND = 1e-3  # float32, same weights, different summation order: measured 6e-5 on logits up to 40


def prompt_logits(model, ids: list[int]) -> torch.Tensor:
    return model.step(model.new_sequence(), ids, SamplingParams(temperature=0)).logits


@pytest.fixture(scope="module")
def smollm2():
    """Our model from the pack (fetched and converted once, into the user cache) and transformers'
    model from the pack's GGUF file."""
    model = load_model("smollm2-135m", device="cpu", dtype="float32")
    gguf = packs.gguf_path("smollm2-135m")
    reference = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    return model, reference.eval(), gguf


def test_smollm2_greedy_continuation_matches_transformers(smollm2):
    model, reference, _ = smollm2
    ids = model.encode_chat(PROMPT)
    ours = generate(
        model, ids, sampling=SamplingParams(temperature=0, max_tokens=64), stop_ids=model.stop_ids()
    )
    # an explicit mask: the prompt holds token 2, which transformers could take for padding
    prompt = torch.tensor([ids])
    theirs = reference.generate(
        prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=64
    )
    assert ours.finished == "length"  # a long answer: 64 tokens, no end of turn on either side
    assert ours.tokens == theirs[0, len(ids) :].tolist()


def test_smollm2_logits_match_transformers(smollm2):
    model, reference, _ = smollm2
    ids = model.encode_chat(PROMPT) + model.tokenizer.encode("A steam engine burns coal")
    with torch.no_grad():
        theirs = reference(torch.tensor([ids])).logits[0]
    assert (prompt_logits(model, ids) - theirs).abs().max().item() < LOGITS_BOUND


def test_smollm2_converted_tokenizer_equals_the_gguf_one(smollm2):
    model, _, gguf = smollm2
    original = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    text = "Héllo wörld <|im_start|>user\n  two  spaces, 3.14159 and\ttabs<|im_end|>"
    assert model.tokenizer.encode(text) == original.encode(text)
    assert model.tokenizer.apply_chat_template(
        PROMPT, add_generation_prompt=True
    ) == original.apply_chat_template(PROMPT, add_generation_prompt=True)
    assert model.tokenizer.eos_token_id == original.eos_token_id == 2


@pytest.mark.parametrize(
    "family,tie", [("llama", False), ("llama", True), ("qwen2", False), ("qwen2", True), ("qwen3", False)]
)
def test_tiny_gguf_logits_match_transformers(tmp_path, family, tie):
    reference = tiny_hf_model(family, tie=tie)
    path = write_gguf(reference, tmp_path / f"tiny-{family}.gguf")
    model = load_model(str(path), device="cpu", dtype="float32")
    assert model.config.tie_word_embeddings == tie
    ids = model.encode_chat([{"role": "user", "content": "the cat sat on the mat."}])
    with torch.no_grad():
        theirs = reference(torch.tensor([ids])).logits[0]
    assert (prompt_logits(model, ids) - theirs).abs().max().item() < 1e-4


def test_llama_gguf_holds_interleaved_rows_that_loading_restores(tmp_path):
    """The equality above is not vacuous: the file's Q rows are not transformers' Q rows."""
    reference = tiny_hf_model("llama")
    path = write_gguf(reference, tmp_path / "tiny.gguf")
    q = reference.model.layers[0].self_attn.q_proj.weight.detach()
    raw = next(t for t in GGUFReader(path).tensors if t.name == "blk.0.attn_q.weight")
    assert not np.array_equal(np.asarray(raw.data).reshape(q.shape), q.numpy())
    _, tensors, _ = read_gguf(path)
    assert torch.equal(tensors["model.layers.0.self_attn.q_proj.weight"], q)


def test_gguf_config_comes_from_metadata(tmp_path):
    reference = tiny_hf_model("qwen2")
    config, _, tokenizer = read_gguf(write_gguf(reference, tmp_path / "tiny.gguf"))
    assert (config.model_type, config.vocab_size, config.hidden_size, config.num_layers) == (
        "qwen2",
        64,
        64,
        2,
    )
    assert (config.num_heads, config.num_kv_heads, config.head_dim, config.intermediate_size) == (
        4,
        2,
        16,
        96,
    )
    assert config.qkv_bias and not config.qk_norm and not config.tie_word_embeddings
    assert config.eos_token_ids == [2] and tokenizer.eos_token == "<|im_end|>"


def one_line_error(call, *args, **kw) -> str:
    with pytest.raises(EngineError) as err:
        call(*args, **kw)
    message = str(err.value)
    assert message and "\n" not in message
    return message


def test_unsupported_architecture_is_named(tmp_path):
    path = write_gguf(tiny_hf_model("llama"), tmp_path / "other.gguf", arch="gpt2")
    assert "unsupported architecture 'gpt2'" in one_line_error(load_model, str(path), device="cpu")


def test_truncated_file_is_reported(tmp_path):
    path = write_gguf(tiny_hf_model("llama"), tmp_path / "cut.gguf")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    message = one_line_error(load_model, str(path), device="cpu")
    assert "truncated or corrupt" in message and "cut.gguf" in message


def test_file_that_is_not_gguf_is_reported(tmp_path):
    path = tmp_path / "notes.gguf"
    path.write_text("just some text\n")
    assert "not a GGUF file" in one_line_error(load_model, str(path), device="cpu")


def test_missing_file_and_unknown_name_are_reported(tmp_path):
    assert "no model" in one_line_error(load_model, str(tmp_path / "missing.gguf"), device="cpu")
    assert "no GGUF file" in one_line_error(read_gguf, tmp_path / "missing.gguf")
    message = one_line_error(load_model, "no-such-model", device="cpu")
    assert "smollm2-135m" in message  # the packs there are, listed


@pytest.mark.slow
def test_coder_gguf_logits_match_transformers():
    """Qwen2 with Q4_K, Q6_K, Q5_0 and Q8_0 tensors: the 0.5B Coder pack's GGUF read directly
    (measured: 2e-5 on logits up to 32)."""
    packs.ensure("qwen2.5-coder-0.5b")
    gguf = packs.gguf_path("qwen2.5-coder-0.5b")
    model = load_model(str(gguf), device="cpu", dtype="float32", max_context=256)
    reference = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    ids = model.encode_chat([{"role": "user", "content": "Write a Python function that reverses a string."}])
    with torch.no_grad():
        theirs = reference.eval()(torch.tensor([ids])).logits[0]
    assert (prompt_logits(model, ids) - theirs).abs().max().item() < LOGITS_BOUND
