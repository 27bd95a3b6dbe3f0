"""The DFlash drafter network (z-lab's block-diffusion drafter), on its own paged cache.

The target's residual stream after a few of its layers, for every verified token, becomes the
drafter's context: fc over the concatenated states, hidden_norm, then per drafter layer the
same k/v projections (k_norm, RoPE at the token's position) that the block itself uses. Those
context K/V are written once per token into the drafter's cache and kept across steps.

A pass then runs the block [anchor, mask x (B-1)] (the last verified token and B-1 masks,
embedded by the target) through Qwen3-style layers whose queries see the whole context and the
whole block, with no causal mask; the target's lm_head over block positions 1..B-1 gives B-1
drafts at once. The block's own K/V leave the cache after the pass (truncate): only verified
tokens are context. The block has a static shape (B tokens), whatever k, so the pass can be
captured as a CUDA graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from engine.attention import StepContext
from engine.config import ModelConfig
from engine.errors import EngineError
from engine.kv_cache import PagePool, SeqCache
from engine.model import DecoderLayer, RMSNorm, rope

PAGE_SIZE = 16


def default_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """z-lab's rule when the config names no layers: spread from layer 1 to layer L-3."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    span = num_target_layers - 4
    return [round(1 + i * span / (num_draft_layers - 1)) for i in range(num_draft_layers)]


@dataclass
class DFlashConfig:
    shape: ModelConfig  # the drafter's own layers (Qwen3 layout: q/k RMSNorm, no bias)
    block_size: int
    num_target_layers: int
    mask_token_id: int
    target_layer_ids: tuple[int, ...]

    @classmethod
    def from_zlab(cls, cfg: dict) -> DFlashConfig:
        """From a z-lab config.json dict (block_size, num_target_layers, dflash_config, Qwen3 keys)."""
        dflash = cfg.get("dflash_config") or {}
        found = {k: cfg.get(k) for k in REQUIRED_KEYS}
        found["dflash_config.mask_token_id"] = dflash.get("mask_token_id")
        for key, value in found.items():
            if value is None:
                raise EngineError(f"drafter config.json has no {key!r}: not a DFlash drafter")
        if cfg.get("attention_bias"):
            raise EngineError("drafter config.json asks for attention biases: DFlash drafters have none")
        if any(t != "full_attention" for t in cfg.get("layer_types") or ()):
            raise EngineError(
                "drafter config.json has sliding-window layers: only full attention is supported"
            )
        # the drafter's layers are Qwen3's (q/k RMSNorm, no bias), whatever model_type says
        shape = ModelConfig.from_hf({**cfg, "model_type": "qwen3"})
        ids = dflash.get("target_layer_ids")
        if ids is None:
            ids = default_target_layer_ids(cfg["num_target_layers"], shape.num_layers)
        return cls(shape, cfg["block_size"], cfg["num_target_layers"], dflash["mask_token_id"], tuple(ids))

    def to_zlab(self) -> dict:
        """The config.json dict z-lab's loader (and ours) reads."""
        s = self.shape
        return {
            "architectures": ["DFlashDraftModel"],
            "model_type": "qwen3",
            "block_size": self.block_size,
            "num_target_layers": self.num_target_layers,
            "dflash_config": {
                "mask_token_id": self.mask_token_id,
                "target_layer_ids": list(self.target_layer_ids),
            },
            "num_hidden_layers": s.num_layers,
            "hidden_size": s.hidden_size,
            "intermediate_size": s.intermediate_size,
            "num_attention_heads": s.num_heads,
            "num_key_value_heads": s.num_kv_heads,
            "head_dim": s.head_dim,
            "rope_theta": s.rope_theta,
            "rms_norm_eps": s.rms_norm_eps,
            "vocab_size": s.vocab_size,
            "attention_bias": False,
            "tie_word_embeddings": False,
            "layer_types": ["full_attention"] * s.num_layers,
        }


REQUIRED_KEYS = (
    "block_size",
    "num_target_layers",
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "vocab_size",
)


def zlab_weight_shapes(cfg: DFlashConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor of a z-lab checkpoint, by name, with its shape (no embeddings, no lm_head)."""
    s = cfg.shape
    h, q, kv = s.hidden_size, s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim
    shapes = {
        "fc.weight": (h, len(cfg.target_layer_ids) * h),
        "hidden_norm.weight": (h,),
        "norm.weight": (h,),
    }
    for i in range(s.num_layers):
        p = f"layers.{i}."
        shapes.update(
            {
                p + "input_layernorm.weight": (h,),
                p + "post_attention_layernorm.weight": (h,),
                p + "self_attn.q_proj.weight": (q, h),
                p + "self_attn.k_proj.weight": (kv, h),
                p + "self_attn.v_proj.weight": (kv, h),
                p + "self_attn.o_proj.weight": (h, q),
                p + "self_attn.q_norm.weight": (s.head_dim,),
                p + "self_attn.k_norm.weight": (s.head_dim,),
                p + "mlp.gate_proj.weight": (s.intermediate_size, h),
                p + "mlp.up_proj.weight": (s.intermediate_size, h),
                p + "mlp.down_proj.weight": (h, s.intermediate_size),
            }
        )
    return shapes


def rope_tables(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    dims = torch.arange(0, head_dim, 2, dtype=torch.float, device=positions.device)
    freqs = positions.float()[:, None] * (1.0 / theta ** (dims / head_dim))[None, :]
    angles = torch.cat((freqs, freqs), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


class DFlashDrafter(nn.Module):
    """The drafter: `extend(states)` adds verified tokens to its context, `block(anchor)` drafts.

    Bound to one target (`bind`): the target's embed_tokens and lm_head are used, never copied."""

    def __init__(self, cfg: DFlashConfig):
        super().__init__()
        s = cfg.shape
        self.config = cfg
        self.block_size = cfg.block_size
        self.mask_token_id = cfg.mask_token_id
        self.target_layer_ids = cfg.target_layer_ids
        # The target captures each layer once, in layer order; fc reads them in the config's order
        # (which may repeat or go backwards).
        self.capture_layers = tuple(sorted(set(cfg.target_layer_ids)))
        self.state_order = [self.capture_layers.index(i) for i in cfg.target_layer_ids]
        self.name = "dflash"
        self.fc = nn.Linear(len(cfg.target_layer_ids) * s.hidden_size, s.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        # The block runs through ordinary decoder layers (fused qkv, q/k norm, paged attention);
        # the context reuses their k/v rows and k_norm (see extend).
        self.layers = nn.ModuleList(DecoderLayer(s, i) for i in range(s.num_layers))
        self.norm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.target = None

    def bind(self, target, max_context: int) -> None:
        """Use this target's embeddings and lm_head; give the drafter a cache for max_context tokens."""
        s = self.config.shape
        p = self.fc.weight
        pages = -(-(max_context + self.block_size) // PAGE_SIZE)
        self.target = target
        self.pool = PagePool(s.num_layers, pages, PAGE_SIZE, s.num_kv_heads, s.head_dim, p.dtype, p.device)
        self.seq = SeqCache(self.pool)
        # the block's token ids live in one static buffer: [anchor, mask x (B-1)]
        self.block_ids = torch.full((self.block_size,), self.mask_token_id, dtype=torch.long, device=p.device)
        self.block_offsets = torch.arange(self.block_size, device=p.device)

    @property
    def context_length(self) -> int:
        """Tokens whose K/V are in the drafter's cache."""
        return self.seq.length

    def clear(self) -> None:
        self.seq.release()

    @torch.inference_mode()
    def extend(self, states: torch.Tensor) -> None:
        """Append verified tokens to the context: states [n, len(capture_layers) * H], the target's
        residual stream after each of capture_layers, tokens in order."""
        n = states.shape[0]
        if n == 0:
            return
        s = self.config.shape
        if self.state_order != list(range(len(self.capture_layers))):
            states = states.view(n, len(self.capture_layers), s.hidden_size)[:, self.state_order].reshape(
                n, -1
            )
        start = self.seq.length
        self.seq.append(n)
        slots = self.seq.slots(start, start + n).to(self.fc.weight.device)
        positions = torch.arange(start, start + n, device=slots.device)
        cos, sin = rope_tables(positions, s.head_dim, s.rope_theta, self.fc.weight.dtype)
        features = self.hidden_norm(self.fc(states.to(self.fc.weight.dtype)))
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            kv = F.linear(features, attn.qkv_proj.weight[attn.q_size :])
            k, v = kv.view(n, 2 * s.num_kv_heads, s.head_dim).split(s.num_kv_heads, dim=1)
            k = rope(attn.k_norm(k), cos, sin)
            self.pool.k[i].index_copy_(0, slots, k)
            self.pool.v[i].index_copy_(0, slots, v)

    @torch.inference_mode()
    def block(self, anchor: int) -> torch.Tensor:
        """Logits [B-1, V] (float32) of the drafts after `anchor`, the token at position
        context_length. The cache is left holding the context only."""
        s = self.config.shape
        start = self.seq.length
        self.seq.append(self.block_size)
        try:
            device = self.block_ids.device
            slots = self.seq.slots(0, start + self.block_size).to(device)
            ctx = StepContext(self.pool, slots[start:], slots, causal=False)
            positions = self.block_offsets + start
            self.block_ids[0] = anchor
            x = self.target.decoder.embed_tokens(self.block_ids)
            cos, sin = rope_tables(positions, s.head_dim, s.rope_theta, x.dtype)
            for layer in self.layers:
                x = layer(x, cos, sin, ctx)
            return self.target.decoder.logits(self.norm(x[1:]))
        finally:
            self.seq.truncate(start)

    @torch.no_grad()
    def load_zlab_state(self, tensors: dict[str, torch.Tensor]) -> None:
        """Copy weights given under z-lab's names (fc.weight, layers.0.self_attn.q_proj.weight, ...)."""
        shapes = zlab_weight_shapes(self.config)
        for name, shape in shapes.items():
            if name not in tensors:
                raise EngineError(
                    f"drafter weights are missing {name!r}: not a DFlash checkpoint of this shape"
                )
            if tuple(tensors[name].shape) != shape:
                raise EngineError(
                    f"drafter weight {name} has shape {tuple(tensors[name].shape)}, the config implies {shape}"
                )
        leftover = [k for k in tensors if k not in shapes and "rotary_emb" not in k]
        if leftover:
            raise EngineError(
                f"drafter weights hold {len(leftover)} tensors DFlash has no place for, e.g. {leftover[0]!r}"
            )
        own = dict(self.named_parameters())
        for name in ("fc.weight", "hidden_norm.weight", "norm.weight"):
            own[name].copy_(tensors[name])
        for i in range(self.config.shape.num_layers):
            p = f"layers.{i}."
            a, m = p + "self_attn.", p + "mlp."
            for norm in ("input_layernorm", "post_attention_layernorm"):
                own[p + norm + ".weight"].copy_(tensors[p + norm + ".weight"])
            own[a + "qkv_proj.weight"].copy_(torch.cat([tensors[a + f"{x}_proj.weight"] for x in "qkv"]))
            for name in ("o_proj", "q_norm", "k_norm"):
                own[a + name + ".weight"].copy_(tensors[a + name + ".weight"])
            own[m + "gate_up_proj.weight"].copy_(
                torch.cat([tensors[m + "gate_proj.weight"], tensors[m + "up_proj.weight"]])
            )
            own[m + "down_proj.weight"].copy_(tensors[m + "down_proj.weight"])
