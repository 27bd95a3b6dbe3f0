"""Read a GGUF file: the config from its metadata, tensors dequantised under transformers' names,
and the tokenizer (through transformers' own GGUF reader)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from engine.errors import EngineError
from engine.loading.gguf_header import GGUFHeader
from engine.loading.tokenizer import load_tokenizer
from engine.network.config import ModelConfig

ARCHITECTURES = ("llama", "qwen2", "qwen3")

# llama.cpp's converter interleaves the two rotary halves of every Q and K head of these
# architectures (its kernels rotate adjacent pairs); our RoPE rotates halves, as transformers does.
PERMUTED_QK = ("llama",)

LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
LAYER_TENSOR = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")

Progress = Callable[[str], None] | None


def read_gguf(
    path: str | Path, progress: Progress = None
) -> tuple[ModelConfig, dict[str, torch.Tensor], object]:
    """Config, float32 tensors under HF names (model.layers.0.self_attn.q_proj.weight, ...) and the
    tokenizer (None when transformers cannot build one) of a GGUF file."""
    path = Path(path)
    if progress:
        progress(f"{path.name}: reading")
    reader = open_gguf(path)
    config = gguf_config(reader, path)
    tensors = dict(iter_tensors(reader, config, progress))
    if progress:
        progress(f"{path.name}: reading the tokenizer")
    return config, tensors, load_tokenizer(path.parent, gguf_file=path.name)


def open_gguf(path: Path) -> GGUFHeader:
    """The file's header (metadata and tensor table, gguf_header.py), or one EngineError line for
    a missing, foreign, truncated or corrupt file."""
    if not path.is_file():
        raise EngineError(f"no GGUF file at {path}")
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise EngineError(f"{path} is not a GGUF file (it does not start with the GGUF magic)")
    try:
        return GGUFHeader(path)
    except Exception as err:  # noqa: BLE001 (a cut file fails in many ways: one line for all)
        raise EngineError(f"{path} is truncated or corrupt: {type(err).__name__}: {err}") from None


def gguf_config(reader, path: Path) -> ModelConfig:
    """ModelConfig from the `{arch}.*` metadata; presence of tensors decides bias, q/k norm and tying."""
    arch = reader.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise EngineError(
            f"unsupported architecture {arch!r} in {path.name}: specchat runs {', '.join(ARCHITECTURES)}"
        )

    def meta(key: str, default=None):
        value = reader.get(f"{arch}.{key}", default)
        if value is None:
            raise EngineError(f"{path.name} lacks the metadata key {arch}.{key}")
        return value

    names = {t.name: t for t in reader.tensors}
    if "token_embd.weight" not in names:
        raise EngineError(f"{path.name} has no token_embd.weight tensor")
    scaling = reader.get(f"{arch}.rope.scaling.type", "none")
    if scaling != "none" or "rope_freqs.weight" in names:
        raise EngineError(f"{path.name} uses RoPE scaling ({scaling}): only plain RoPE is implemented")
    heads, hidden = int(meta("attention.head_count")), int(meta("embedding_length"))
    head_dim = int(meta("attention.key_length", hidden // heads))
    if int(meta("rope.dimension_count", head_dim)) != head_dim:
        raise EngineError(f"{path.name} rotates part of each head: only full-head RoPE is implemented")
    eos = reader.get("tokenizer.ggml.eos_token_id")
    return ModelConfig(
        model_type=arch,
        vocab_size=int(names["token_embd.weight"].shape[-1]),  # GGUF lists dimensions innermost first
        hidden_size=hidden,
        intermediate_size=int(meta("feed_forward_length")),
        num_layers=int(meta("block_count")),
        num_heads=heads,
        num_kv_heads=int(meta("attention.head_count_kv", heads)),
        head_dim=head_dim,
        rms_norm_eps=float(meta("attention.layer_norm_rms_epsilon", 1e-6)),
        rope_theta=float(meta("rope.freq_base", 10000.0)),
        max_position=int(meta("context_length", 32768)),
        tie_word_embeddings="output.weight" not in names,
        qkv_bias="blk.0.attn_q.bias" in names,
        qk_norm="blk.0.attn_q_norm.weight" in names,
        bos_token_id=reader.get("tokenizer.ggml.bos_token_id"),
        eos_token_ids=[] if eos is None else [int(eos)],
    )


def hf_name(name: str) -> str:
    """transformers' name for a GGUF tensor name (blk.3.attn_q.weight -> model.layers.3.self_attn.q_proj.weight)."""
    m = LAYER_TENSOR.fullmatch(name)
    if m and m.group(2) in LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{LAYER_NAMES[m.group(2)]}.{m.group(3)}"
    stem, _, kind = name.rpartition(".")
    if stem in GLOBAL_NAMES:
        return f"{GLOBAL_NAMES[stem]}.{kind}"
    raise EngineError(f"GGUF tensor {name!r} has no place in this architecture")


def unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's rotary permutation of Q or K rows: within each head the converter moved
    row i of the first half to 2i and row i of the second half to 2i + 1."""
    half = w.shape[0] // heads // 2
    return w.reshape(heads, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def dequantised(tensor) -> np.ndarray:
    """float32 values of one GGUF tensor in numpy's (outermost first) shape."""
    from gguf.quants import dequantize

    try:
        values = dequantize(tensor.data, tensor.tensor_type)
    except NotImplementedError:
        raise EngineError(
            f"GGUF tensor {tensor.name} uses {tensor.tensor_type.name}, which cannot be read"
        ) from None
    return values.reshape(tuple(int(d) for d in reversed(tensor.shape))).astype(np.float32, copy=False)


def iter_tensors(
    reader, config: ModelConfig, progress: Progress = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, float32 tensor) for every tensor of the file, in order, a few at a time (a caller
    may cast each before more are made, so a large model never exists whole in float32)."""
    permuted = config.model_type in PERMUTED_QK
    tensors = list(reader.tensors)
    # numpy releases the GIL inside the dequantisers, so threads share the work across cores
    threads = min(16, os.cpu_count() or 1)
    done = 0
    with ThreadPoolExecutor(threads) as workers:
        for start in range(0, len(tensors), 2 * threads):
            batch = tensors[start : start + 2 * threads]
            for tensor, values in zip(batch, workers.map(dequantised, batch)):
                yield prepared(tensor, values, config, permuted)
                done += 1
                if progress and done * 10 // len(tensors) != (done - 1) * 10 // len(tensors):
                    progress(f"dequantising tensors: {done}/{len(tensors)}")


def prepared(tensor, values: np.ndarray, config: ModelConfig, permuted: bool) -> tuple[str, torch.Tensor]:
    name = hf_name(tensor.name)
    if permuted and ".q_proj." in name:
        values = unpermute(values, config.num_heads)
    elif permuted and ".k_proj." in name:
        values = unpermute(values, config.num_kv_heads)
    if not values.flags.writeable:  # float32 tensors come straight from the read-only file map
        values = values.copy()
    return name, torch.from_numpy(np.ascontiguousarray(values))
