"""ModelConfig: the shape of one decoder of the Llama / Qwen2 / Qwen3 family."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import EngineError

# model_type -> (q/k/v bias, per-head q/k RMSNorm)
FAMILIES = {
    "llama": (False, False),
    "mistral": (False, False),
    "qwen2": (True, False),
    "qwen3": (False, True),
}


@dataclass
class ModelConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position: int = 32768
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    qk_norm: bool = False
    bos_token_id: int | None = None
    eos_token_ids: list[int] = field(default_factory=list)

    @classmethod
    def from_hf(cls, cfg: dict) -> ModelConfig:
        """From a transformers config.json dict (both the 4.x and 5.x spellings of RoPE)."""
        model_type = cfg.get("model_type", "")
        if model_type not in FAMILIES:
            raise EngineError(
                f"unsupported architecture {model_type!r}: specchat runs {', '.join(sorted(FAMILIES))}"
            )
        bias, qk_norm = FAMILIES[model_type]
        window = cfg.get("sliding_window") if cfg.get("use_sliding_window", True) else None
        if window and window < cfg.get("max_position_embeddings", 32768):
            # every layer here attends to the whole context: a windowed model would read other keys
            raise EngineError(
                f"unsupported sliding-window attention ({window} tokens): specchat runs full-attention models"
            )
        rope = cfg.get("rope_parameters") or {}
        scaling = cfg.get("rope_scaling") or {}
        rope_type = rope.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
        if rope_type != "default":
            raise EngineError(f"unsupported RoPE scaling {rope_type!r}: only plain RoPE is implemented")
        heads = cfg["num_attention_heads"]
        eos = cfg.get("eos_token_id")
        return cls(
            model_type=model_type,
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
            rope_theta=rope.get("rope_theta", cfg.get("rope_theta", 10000.0)),
            max_position=cfg.get("max_position_embeddings", 32768),
            tie_word_embeddings=cfg.get("tie_word_embeddings", False),
            qkv_bias=cfg.get("attention_bias", bias),
            qk_norm=qk_norm,
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=[] if eos is None else ([eos] if isinstance(eos, int) else list(eos)),
        )

    @classmethod
    def from_json(cls, path: str | Path) -> ModelConfig:
        return cls.from_hf(json.loads(Path(path).read_text()))


DTYPES = ("float32", "bfloat16", "float16")  # what a model loads in, by torch's names

# Shapes for step benchmarks with random weights (speed does not depend on the values).
PRESETS = {
    "qwen3-4b": dict(
        model_type="qwen3", vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_layers=36,
        num_heads=32, num_kv_heads=8, head_dim=128, rope_theta=1e6, tie_word_embeddings=True,
        qk_norm=True, max_position=40960,
    ),
    "qwen2.5-1.5b": dict(
        model_type="qwen2", vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_layers=28,
        num_heads=12, num_kv_heads=2, head_dim=128, rope_theta=1e6, tie_word_embeddings=True,
        qkv_bias=True, max_position=32768,
    ),
    "qwen2.5-0.5b": dict(
        model_type="qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864, num_layers=24,
        num_heads=14, num_kv_heads=2, head_dim=64, rope_theta=1e6, tie_word_embeddings=True,
        qkv_bias=True, max_position=32768,
    ),
}


def preset(name: str) -> ModelConfig:
    if name not in PRESETS:
        raise EngineError(f"unknown shape {name!r}; known: {', '.join(PRESETS)}")
    return ModelConfig(**PRESETS[name])
