"""Tiny GGUF files written the way llama.cpp's converter writes them, from tiny random transformers
models: F32 tensors under GGUF names, Llama's Q/K rows interleaved, a small byte-level tokenizer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from gguf import GGUFWriter, TokenType
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

VOCAB = 64
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CONFIGS = {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config}
LAYER_NAMES = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def tiny_hf_model(family: str = "llama", tie: bool = False, seed: int = 0):
    """A random float32 transformers model; weights spread wide (0.3) so that attention scores, and
    with them any mistake in the Q/K row order, move the logits."""
    torch.manual_seed(seed)
    config = CONFIGS[family](
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        max_position_embeddings=256,
        tie_word_embeddings=tie,
        initializer_range=0.3,
        bos_token_id=1,
        eos_token_id=2,
    )
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def interleave_rotary_halves(w: np.ndarray, heads: int) -> np.ndarray:
    """What llama.cpp's converter does to Llama Q/K rows: within each head, row i of the first
    half goes to row 2i and row i of the second half to row 2i + 1."""
    half = w.shape[0] // heads // 2
    return w.reshape(heads, 2, half, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_name(hf: str) -> str:
    if hf.startswith("model.layers."):
        layer, rest = hf.removeprefix("model.layers.").split(".", 1)
        module, kind = rest.rsplit(".", 1)
        return f"blk.{layer}.{LAYER_NAMES[module]}.{kind}"
    return {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }[hf]


def tokenizer_vocab() -> tuple[list[str], list[str]]:
    """Byte-level tokens (Ġ is the space, Ċ the newline) and merges, VOCAB in all."""
    letters = list("abcdefghijklmnopqrstuvwxyz") + ["Ġ", "Ċ", ".", ",", "!", "?"]
    pairs = [(a, b) for a in "Ġthe" for b in "aeinorst" if a != b][: VOCAB - len(SPECIALS) - len(letters)]
    return SPECIALS + letters + [a + b for a, b in pairs], [f"{a} {b}" for a, b in pairs]


def write_gguf(model, path: Path, arch: str | None = None) -> Path:
    """Write model to path as a llama.cpp converter would (F32 tensors)."""
    cfg = model.config
    arch = arch or cfg.model_type
    w = GGUFWriter(str(path), arch)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    tokens, merges = tokenizer_vocab()
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types(
        [TokenType.CONTROL] * len(SPECIALS) + [TokenType.NORMAL] * (len(tokens) - len(SPECIALS))
    )
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template(CHAT_TEMPLATE)
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        values = tensor.detach().numpy().astype(np.float32)
        if arch == "llama" and ".q_proj." in name:
            values = interleave_rotary_halves(values, cfg.num_attention_heads)
        elif arch == "llama" and ".k_proj." in name:
            values = interleave_rotary_halves(values, cfg.num_key_value_heads)
        w.add_tensor(gguf_name(name), values)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
