"""The DFlash drafter network (z-lab's block-diffusion drafter), on its own paged cache.

The target's residual stream after a few of its layers, for every verified token, becomes the
drafter's context: fc over the concatenated states, hidden_norm, then per drafter layer the
same k/v projections (k_norm, RoPE at the token's position) that the block itself uses. Those
context K/V are written once per token into the drafter's cache and kept across steps.

A pass then runs the block [anchor, mask x (B-1)] (the last verified token and B-1 masks,
embedded by the target) through Qwen3-style layers whose queries see the whole context and the
whole block, with no causal mask; the target's lm_head over block positions 1..B-1 gives B-1
drafts at once. The block's own K/V leave the cache after the pass (truncate): only verified
tokens are context. The block has a static shape (B tokens), whatever k, so on CUDA the pass
(context extension, block, lm_head, argmax) replays a CUDA graph (engine/speculation/proposers/dflash/graphs.py).

The context extension finds the cache through a page table and positions on the device, and
on CUDA so does the block (the target's fused Triton layers), so one body serves the eager path
and the graphs. On the CPU the block runs the torch reference layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from engine.errors import EngineError
from engine.limits import MAX_STEP, PAGE_SIZE
from engine.network.config import ModelConfig
from engine.network.decoder import (
    DecoderLayer,
    RMSNorm,
    rope,
    rope_frequencies,
    rope_tables,
    triton_available,
)
from engine.runtime.kv_cache import PagePool, SeqCache
from engine.runtime.step_io import StepContext
from engine.speculation.proposers.dflash.graphs import DrafterGraphs


def default_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """z-lab's rule when the config names no layers: spread from layer 1 to layer L-3."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    span = num_target_layers - 4
    return [round(1 + i * span / (num_draft_layers - 1)) for i in range(num_draft_layers)]


def distinct_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """z-lab's rule wherever it names distinct layers of the target (every real model); for a
    target too shallow for it (it repeats layers, or names layer -1 below 3 layers), up to
    num_draft_layers distinct layers spread evenly from the first to the last."""
    ids = default_target_layer_ids(num_target_layers, num_draft_layers)
    if len(set(ids)) == len(ids) and all(0 <= i < num_target_layers for i in ids):
        return ids
    count = min(num_draft_layers, num_target_layers)
    if count == 1:
        return [num_target_layers // 2]
    # steps of (L - 1) / (count - 1) >= 1 apart: rounding cannot make two of them meet
    return [round(i * (num_target_layers - 1) / (count - 1)) for i in range(count)]


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


class DFlashDrafter(nn.Module):
    """The drafter: `draft(states, anchor)` adds verified tokens to its context and drafts a block.

    Bound to one target (`bind`): the target's embed_tokens and lm_head are used, never copied."""

    # a_1.. its own training measured, when it was trained here (files.measured_acceptance)
    measured: list[float] | None = None

    def __init__(self, cfg: DFlashConfig):
        super().__init__()
        s = cfg.shape
        self.config = cfg
        self.block_size = cfg.block_size
        self.mask_token_id = cfg.mask_token_id
        self.ahead_sure: torch.Tensor | None = None  # its probability of the first draft of the last pass drafted ahead
        self.target_layer_ids = cfg.target_layer_ids
        # The target keeps each layer's states once, in layer order; fc reads them in the config's order
        # (which may repeat or go backwards).
        self.state_layers = tuple(sorted(set(cfg.target_layer_ids)))
        self.state_order = [self.state_layers.index(i) for i in cfg.target_layer_ids]
        self.name = "dflash"
        self.fc = nn.Linear(len(cfg.target_layer_ids) * s.hidden_size, s.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        # The block runs through ordinary decoder layers (fused qkv, q/k norm, paged attention);
        # the context reuses their k/v rows and k_norm (see _extend).
        self.layers = nn.ModuleList(DecoderLayer(s, i) for i in range(s.num_layers))
        self.norm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.target = None
        self.graphs = None
        self.vocab = None  # DraftVocab: the tokens it drafts, when fewer than the target's (vocab.py)

    def use_vocab(self, ids: list[int]) -> None:
        """Draft only over `ids` (ascending token ids), through the target's lm_head rows of
        those. Set once, after `bind` and before any graph is captured: a pass's graph holds it."""
        from engine.speculation.proposers.dflash.vocab import DraftVocab

        if self.graphs is not None and self.graphs.graphs:
            raise EngineError("a drafter's vocabulary is set before its graphs are captured")
        self.vocab = DraftVocab(ids, self.target.decoder.lm_head.weight)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """float32 logits of the block's final hidden over the tokens it drafts: the target's whole
        vocabulary, or its own (`vocab`, [.., N])."""
        if self.vocab is None:
            return self.target.decoder.logits(hidden)
        if hidden.is_cuda and triton_available():  # as the target's own logits are made
            from engine.kernels.gemv import linear

            return linear(hidden, self.vocab.head, None, False, torch.float32)
        return F.linear(hidden, self.vocab.head).float()

    @staticmethod
    def sure_of(logits: torch.Tensor) -> torch.Tensor:
        """The drafter's probability of its first greedy draft, of `logits` [B-1, ...]: [1], on
        the device (a policy reads the first alone: one row of the vocabulary, not B-1)."""
        return torch.softmax(logits[:1].float(), dim=-1).amax(dim=-1)

    def drafts_of(self, logits: torch.Tensor) -> torch.Tensor:
        """The greedy drafts (token ids) of logits from `logits`."""
        picked = logits.argmax(dim=-1)
        return picked if self.vocab is None else self.vocab.to_tokens(picked)

    def bind(self, target, max_context: int) -> None:
        """Use this target's embeddings and lm_head; give the drafter a cache for max_context
        tokens; on CUDA with the target's graphs, graphs of its own in the target's memory pool."""
        s = self.config.shape
        p = self.fc.weight
        device = p.device
        # a pass drafted ahead holds a step's worth of states past the context for a while (draft_ahead)
        pages = -(-(max_context + MAX_STEP + self.block_size) // PAGE_SIZE)
        target_graphs = getattr(target, "graphs", None)
        self.target = target
        self.backend = getattr(target, "backend", "torch")
        # graphs keep one page for themselves: the scratch their warm-ups write
        self.pool = PagePool(
            s.num_layers,
            pages + (target_graphs is not None),
            PAGE_SIZE,
            s.num_kv_heads,
            s.head_dim,
            p.dtype,
            device,
        )
        self.seq = SeqCache(self.pool)
        # the block's token ids live in one static buffer: [anchor, mask x (B-1)]
        self.block_ids = torch.full((self.block_size,), self.mask_token_id, dtype=torch.long, device=device)
        self.block_offsets = torch.arange(self.block_size, device=device)
        identity = self.state_order == list(range(len(self.state_layers)))
        self.state_index = None if identity else torch.tensor(self.state_order, device=device)
        self.inv_freq = rope_frequencies(s.head_dim, s.rope_theta, device)
        self.graphs = None
        if target_graphs is not None:
            self.graphs = DrafterGraphs(self, target_graphs.mempool)

    @property
    def context_length(self) -> int:
        """Tokens whose K/V are in the drafter's cache."""
        return self.seq.length

    def clear(self) -> None:
        self.seq.release()

    @torch.inference_mode()
    def draft(self, states: list[torch.Tensor], anchor: int | torch.Tensor, logits: bool = False) -> torch.Tensor:
        """Append the verified tokens' states (in order) to the context, then run the block after
        `anchor` (a token id, or a [1] tensor on the device): the B-1 greedy drafts [B-1], or with
        `logits` their logits [B-1, V] (float32; drafts sampled from them), on the device. With
        graphs this is one replay, whose outputs the next replay overwrites; nothing is read back."""
        if self.graphs is not None:
            scores, drafts = self.graphs.run(states, anchor)
        else:
            if states:
                self.extend(torch.cat(states))
            scores = self.block(anchor)
            drafts = None if logits else self.drafts_of(scores)
        if not logits:
            return drafts
        # sampling reads logits over the target's vocabulary: a drafter's own is spread into it
        return scores if self.vocab is None else self.vocab.spread(scores, self.target.config.vocab_size)

    @torch.inference_mode()
    def draft_ahead(self, states: torch.Tensor, accepted: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
        """draft() queued behind the verify step that decided its inputs, before the host has read
        that step: states [n, ...] are the step's states for all its tokens, of which the first
        accepted + 1 (accepted: a [1] device tensor) become context; anchor ([1], on the device) is
        the step's last token. The greedy drafts [B-1], left on the device, and the drafter's
        probability of the first in `ahead_sure` (a policy reads how sure it is: AdaptivePolicy). Until
        `settle` the cache holds up to a step's worth of positions past the context.

        Every row is taken in: the rows past accepted + 1 are refused drafts' states, and their
        K/V sit exactly where the block's own go (the block starts at accepted + 1), so the block
        writes over them before it reads them, and the next pass writes over the block's."""
        if self.graphs is not None:
            return self.graphs.run_ahead(states, accepted, anchor)
        start = self.seq.length  # op by op the host reads the count (free on the CPU)
        self.extend(states)
        self.seq.truncate(start + int(accepted) + 1)
        logits = self.block(anchor)
        self.ahead_sure = self.sure_of(logits)
        return self.drafts_of(logits)

    def settle(self, length: int) -> None:
        """The context is `length` tokens: what draft_ahead held past it goes."""
        self.seq.truncate(length)

    def take_in(self, states: torch.Tensor) -> None:
        """Append verified tokens to the context without drafting: through context-only graph
        replays where the drafter has graphs, else op by op (`extend`)."""
        if self.graphs is not None:
            self.graphs.extend(states)
        else:
            self.extend(states)

    @torch.inference_mode()
    def extend(self, states: torch.Tensor) -> None:
        """Append verified tokens to the context, op by op: states [n, len(state_layers) * H],
        the target's residual stream after each of state_layers, tokens in order."""
        n = states.shape[0]
        if n == 0:
            return
        start = self.seq.length
        self.seq.append(n)
        device = self.fc.weight.device
        positions = torch.arange(start, start + n, device=device)
        self._extend(states, positions, torch.tensor(self.seq.pages, device=device))

    def _extend(self, states: torch.Tensor, positions: torch.Tensor, page_table: torch.Tensor) -> None:
        """The context projection of states [n, ...] at positions [n] (device tensors): the K/V
        of every drafter layer land in the slots the page table gives those positions."""
        s = self.config.shape
        n = states.shape[0]
        if self.state_index is not None:
            states = states.view(n, len(self.state_layers), s.hidden_size).index_select(1, self.state_index)
            states = states.reshape(n, -1)
        if self.backend == "triton":
            self._fused_extend(states, positions, page_table)
            return
        slots = page_table[positions // PAGE_SIZE] * PAGE_SIZE + positions % PAGE_SIZE
        cos, sin = rope_tables(positions, s.head_dim, s.rope_theta, self.fc.weight.dtype)
        features = self.hidden_norm(self.fc(states.to(self.fc.weight.dtype)))
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            kv = F.linear(features, attn.qkv_proj.weight[attn.q_size :])
            k, v = kv.view(n, 2 * s.num_kv_heads, s.head_dim).split(s.num_kv_heads, dim=1)
            k = rope(attn.k_norm(k), cos, sin)
            self.pool.k[i].index_copy_(0, slots, k)
            self.pool.v[i].index_copy_(0, slots, v)

    def _fused_extend(self, states: torch.Tensor, positions: torch.Tensor, page_table: torch.Tensor) -> None:
        """`_extend` through the fused kernels (CUDA): the norm in one kernel, and per layer the
        K/V product and one kernel for k's norm, RoPE and both stores (the target's own q/k
        kernel, asked for no query heads), where op by op a pass took some forty launches."""
        from engine.kernels.ops import add_rms_norm, qk_rope_store

        features, _ = add_rms_norm(self.fc(states.to(self.fc.weight.dtype)), None, self.hidden_norm.weight,
                                   self.hidden_norm.eps)
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            kv = F.linear(features, attn.qkv_proj.weight[attn.q_size :])
            qk_rope_store(kv, positions, self.inv_freq, attn.k_norm.weight, attn.k_norm.weight, attn.k_norm.eps,
                          self.pool.k[i], self.pool.v[i], page_table, PAGE_SIZE, 0)

    @torch.inference_mode()
    def block(self, anchor: int | torch.Tensor) -> torch.Tensor:
        """Logits [B-1, V] (float32; [B-1, N] over a drafter vocabulary of its own) of the drafts
        after `anchor`, the token at position context_length, op by op. The cache is left holding
        the context only."""
        start = self.seq.length
        self.seq.append(self.block_size)
        try:
            if isinstance(anchor, torch.Tensor):
                self.block_ids[:1].copy_(anchor.view(-1)[-1:])
            else:
                self.block_ids[0] = anchor
            device = self.block_ids.device
            if self.backend == "triton":
                page_table = torch.tensor(self.seq.pages, device=device)
                return self._fused_block(self.block_ids, torch.tensor([start], device=device), page_table)
            return self._reference_block(start)
        finally:
            self.seq.truncate(start)

    def _reference_block(self, start: int) -> torch.Tensor:
        """The block through the torch reference layers (any device)."""
        s = self.config.shape
        slots = self.seq.slots(0, start + self.block_size).to(self.block_ids.device)
        ctx = StepContext(self.pool, slots[start:], slots, causal=False)
        x = self.target.decoder.embed_tokens(self.block_ids)
        cos, sin = rope_tables(self.block_offsets + start, s.head_dim, s.rope_theta, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, ctx)
        return self.logits(self.norm(x[1:]))

    def _fused_block(self, ids: torch.Tensor, start: torch.Tensor, page_table: torch.Tensor) -> torch.Tensor:
        """The block through the fused Triton layers (CUDA): ids [B] at positions start.. (start a
        [1] device tensor), K/V found and written through the page table; logits [B-1, V]."""
        ctx = StepContext(self.pool, None, None, False, "triton", page_table, start)
        positions = start + self.block_offsets
        x, residual = self.target.decoder.embed(ids), None
        for layer in self.layers:
            x, residual = layer.fused_forward(x, residual, positions, self.inv_freq, ctx)
        hidden, _ = self.norm.add_forward(x, residual)
        return self.logits(hidden[1:])

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

    @torch.no_grad()
    def zlab_state(self) -> dict[str, torch.Tensor]:
        """The weights under z-lab's names, the fused projections split back (load_zlab_state's inverse)."""
        own = {k: v.detach() for k, v in self.named_parameters()}
        s = self.config.shape
        q, kv = s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim
        tensors = {name: own[name] for name in ("fc.weight", "hidden_norm.weight", "norm.weight")}
        for i in range(s.num_layers):
            p = f"layers.{i}."
            a, m = p + "self_attn.", p + "mlp."
            for name in ("input_layernorm", "post_attention_layernorm"):
                tensors[p + name + ".weight"] = own[p + name + ".weight"]
            qkv = own[a + "qkv_proj.weight"].split([q, kv, kv])
            tensors.update({a + f"{x}_proj.weight": w for x, w in zip("qkv", qkv, strict=True)})
            for name in ("o_proj", "q_norm", "k_norm"):
                tensors[a + name + ".weight"] = own[a + name + ".weight"]
            gate, up = own[m + "gate_up_proj.weight"].chunk(2)
            tensors[m + "gate_proj.weight"], tensors[m + "up_proj.weight"] = gate, up
            tensors[m + "down_proj.weight"] = own[m + "down_proj.weight"]
        return {k: v.contiguous().cpu() for k, v in tensors.items()}
