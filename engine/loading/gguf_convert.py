"""Write a GGUF model out as an HF-style directory (config.json, model.safetensors, tokenizer), so
that it loads in a second instead of being dequantised again."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch

from engine.errors import EngineError
from engine.loading.gguf_file import Progress, gguf_config, iter_tensors, open_gguf
from engine.loading.tokenizer import load_tokenizer
from engine.network.config import ModelConfig

CLASSES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}


def hf_config(cfg: ModelConfig, dtype: str) -> dict:
    """config.json as transformers writes it (both the 4.x and 5.x spellings of RoPE)."""
    eos = cfg.eos_token_ids[0] if len(cfg.eos_token_ids) == 1 else cfg.eos_token_ids or None
    return {
        "architectures": [CLASSES[cfg.model_type]],
        "model_type": cfg.model_type,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
        "max_position_embeddings": cfg.max_position,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "attention_bias": cfg.qkv_bias,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": eos,
        "torch_dtype": dtype,
    }


def write_hf_dir(gguf: Path, target: Path, dtype: str, progress: Progress = None) -> None:
    """Dequantise gguf into target: matrices in dtype, norms and biases in float32. The directory
    is built under a temporary name and renamed, so target exists only complete."""
    from safetensors.torch import save_file

    if progress:
        progress(f"{gguf.name}: reading")
    reader = open_gguf(gguf)
    config = gguf_config(reader, gguf)
    store = getattr(torch, dtype)
    tensors = {name: t.to(store) if t.dim() > 1 else t for name, t in iter_tensors(reader, config, progress)}
    if progress:
        progress(f"{gguf.name}: converting the tokenizer")
    tokenizer = load_tokenizer(gguf.parent, gguf_file=gguf.name)
    if tokenizer is None:
        raise EngineError(f"transformers cannot read the tokenizer of {gguf}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".convert-"))
    try:
        if progress:
            progress(f"{gguf.name}: writing {target}")
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        tokenizer.save_pretrained(str(tmp))
        (tmp / "config.json").write_text(json.dumps(hf_config(config, dtype), indent=2) + "\n")
        tmp.rename(target)
    except OSError as err:
        if not (target / "config.json").exists():  # not merely a concurrent writer that finished first
            raise EngineError(f"cannot write {target}: {err.strerror or err}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
