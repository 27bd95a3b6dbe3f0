"""The drafter's training forward: every block of a batch in one pass, with gradients.

The serving path (network.py) keeps context K/V in a paged cache and runs one block at a time
under inference mode. Training computes the same function for many blocks at once: the context
K/V of every position come from the target's states (fc, hidden_norm, then each layer's k/v
projection, k_norm and RoPE, exactly as `DFlashDrafter._extend`), the blocks' own K/V from
their layers, and one attention mask (blocks.attention_mask) gives each block its view. The
same parameters serve both paths, so what is trained here is what drafts.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from engine.errors import EngineError
from engine.network.decoder import rope, rope_tables
from engine.runtime.attention import sdpa, with_cudnn
from engine.speculation.proposers.dflash.network import DFlashDrafter
from engine.speculation.proposers.dflash.training.blocks import (
    Blocks,
    acceptance_curve,
    attention_mask,
    block_ids,
    block_positions,
    labels,
    position_weights,
    teacher_rows,
)
from engine.speculation.proposers.dflash.training.linear_loss import linear_cross_entropy
from engine.speculation.proposers.dflash.vocab import DraftVocab


@torch.no_grad()
def target_states(target, ids: list[int]) -> torch.Tensor:
    """The target's residual stream after each of its state_layers for every token of ids,
    [len(ids), n * H] (no_grad, not inference mode: the drafter's graph reads them)."""
    seq = target.new_sequence()
    try:
        seq.append(len(ids))
        ctx = target.context(seq, 0, len(ids))
        tokens = torch.tensor(ids, dtype=torch.long, device=target.device)
        positions = torch.arange(len(ids), device=target.device)
        _, states = target.decoder(tokens, positions, ctx, state_layers=target.state_layers)
        return states
    finally:
        seq.release()


@torch.no_grad()
def batch_states(target, ids: torch.Tensor) -> torch.Tensor:
    """target_states for a batch of right-padded sequences at once, [b, S, n * H] from ids
    [b, S]: one dense causal pass (flash attention on CUDA) that stops after the last state
    layer, instead of one paged prefill per sequence, which left the GPU idle between the
    samples' small launches. Pads sit after each sequence's tokens, which causal attention never
    lets a real token see; their own states are never read."""
    states, _ = dense_pass(target, ids, final=False)
    return states


@torch.no_grad()
def batch_states_and_final(target, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """batch_states, and the target's final hidden [b, S, H] (after every layer and the final
    norm: what its lm_head reads), for distillation against its own next-token distribution."""
    return dense_pass(target, ids, final=True)


def dense_pass(target, ids: torch.Tensor, final: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The states, and with final=True the final hidden (every layer run, then the final norm)."""
    decoder, cfg = target.decoder, target.config
    wanted = set(target.state_layers)
    b, s = ids.shape
    x = decoder.embed_tokens(ids)
    cos, sin = rope_tables(torch.arange(s, device=ids.device), cfg.head_dim, cfg.rope_theta, x.dtype)
    cos, sin = cos.repeat(b, 1), sin.repeat(b, 1)  # rope() takes tokens flat: [b * S, D]
    states = []
    depth = len(decoder.layers) if final else max(wanted) + 1
    for i, layer in enumerate(decoder.layers[:depth]):
        x = dense_layer(layer, x, cos, sin)
        if i in wanted:
            states.append(x)
    return torch.cat(states, dim=-1), decoder.norm(x) if final else None


def target_backends():
    """The target pass's attention kernels: the engine's, or with SPECCHAT_CUDNN_TARGET=1 cuDNN's
    too (an A/B: the sixteenth run trained at 45.8 samples a second with cuDNN's attention
    everywhere, the seventeenth at 36.2 without; its backward failed on some of the drafter's
    masked shapes, and the target pass has none)."""
    return with_cudnn() if os.environ.get("SPECCHAT_CUDNN_TARGET") == "1" else None


def dense_layer(layer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """One decoder layer over x [b, S, H] with a causal mask, no K/V cache."""
    b, s, _ = x.shape
    attn = layer.self_attn
    q, k, v = attn.qkv_proj(layer.input_layernorm(x)).split([attn.q_size, attn.kv_size, attn.kv_size], -1)
    q, k = q.reshape(b * s, attn.num_heads, -1), k.reshape(b * s, attn.num_kv_heads, -1)
    if attn.q_norm is not None:
        q, k = attn.q_norm(q), attn.k_norm(k)
    q, k = rope(q, cos, sin), rope(k, cos, sin)
    heads = [t.view(b, s, -1, attn.head_dim).transpose(1, 2) for t in (q, k, v)]
    out = sdpa(*heads, backends=target_backends(), is_causal=True, scale=attn.scale, enable_gqa=True)
    x = x + attn.o_proj(out.transpose(1, 2).reshape(b, s, attn.q_size))
    return x + layer.mlp(layer.post_attention_layernorm(x))


def rotate(x: torch.Tensor, positions: torch.Tensor, head_dim: int, theta: float) -> torch.Tensor:
    """RoPE over x [b, T, heads, D] at positions [b, T]."""
    b, t = positions.shape
    cos, sin = rope_tables(positions.reshape(-1), head_dim, theta, x.dtype)
    return rope(x.reshape(b * t, *x.shape[2:]), cos, sin).view_as(x)


CHUNK_BLOCKS = 32  # blocks whose queries attend in one call (see drafter_hidden)


def drafter_hidden(drafter: DFlashDrafter, embed, states: torch.Tensor, ids: torch.Tensor, blocks: Blocks,
                   chunk_blocks: int = CHUNK_BLOCKS) -> torch.Tensor:
    """Final-normed hidden states of every block position [b, N * B, H].
    states [b, S, len(state_layers) * H], as the target keeps them (each layer once, in order);
    ids [b, S].

    The attention runs `chunk_blocks` blocks at a time, each chunk's queries against the context
    and that chunk's own block keys: a block never sees another block, so the keys of the other
    chunks would only be masked out, and with 256 blocks of 16 a sample one dense call would score
    every query against 4,096 block keys (more than the context) to use 16 of them."""
    s = drafter.config.shape
    b, length = ids.shape
    cfg = drafter.config
    queries_at = block_positions(blocks, cfg.block_size)  # [b, Q]
    context_at = torch.arange(length, device=ids.device).expand(b, -1)
    n = blocks.anchors.shape[1]
    chunks = [(first, min(chunk_blocks, n - first)) for first in range(0, n, chunk_blocks)]
    masks = [attention_mask(blocks, length, cfg.block_size, first, count) for first, count in chunks]
    if drafter.state_order != list(range(len(drafter.state_layers))):  # fc reads the config's order
        states = states.unflatten(-1, (len(drafter.state_layers), s.hidden_size))[:, :, drafter.state_order]
        states = states.flatten(2)
    features = drafter.hidden_norm(drafter.fc(states))  # [b, S, H]
    x = embed(block_ids(ids, blocks, cfg.block_size, cfg.mask_token_id))  # [b, Q, H]
    for layer in drafter.layers:
        attn = layer.self_attn
        q, k, v = attn.qkv_proj(layer.input_layernorm(x)).split([attn.q_size, attn.kv_size, attn.kv_size], -1)
        ck, cv = F.linear(features, attn.qkv_proj.weight[attn.q_size :]).split(attn.kv_size, -1)
        q = rotate(attn.q_norm(q.unflatten(-1, (s.num_heads, s.head_dim))), queries_at, s.head_dim, s.rope_theta)
        k = rotate(attn.k_norm(k.unflatten(-1, (s.num_kv_heads, s.head_dim))), queries_at, s.head_dim,
                   s.rope_theta)
        ck = rotate(attn.k_norm(ck.unflatten(-1, (s.num_kv_heads, s.head_dim))), context_at, s.head_dim,
                    s.rope_theta)
        cv, v = cv.unflatten(-1, (s.num_kv_heads, s.head_dim)), v.unflatten(-1, (s.num_kv_heads, s.head_dim))
        # K/V heads repeated for their query heads: with a mask, grouped heads would send CUDA's
        # SDPA to its slow math kernel
        group = s.num_heads // s.num_kv_heads
        ck, cv, k, v = (t.transpose(1, 2).repeat_interleave(group, dim=1) for t in (ck, cv, k, v))  # [b, H, ., D]
        q = q.transpose(1, 2)  # [b, H, Q, D]
        outs = []
        for (first, count), mask in zip(chunks, masks, strict=True):
            own = slice(first * cfg.block_size, (first + count) * cfg.block_size)
            outs.append(sdpa(
                q[:, :, own], torch.cat([ck, k[:, :, own]], dim=2), torch.cat([cv, v[:, :, own]], dim=2),
                attn_mask=mask, scale=attn.scale))  # [b, H, count * B, D]
        out = torch.cat(outs, dim=2)
        x = x + attn.o_proj(out.transpose(1, 2).flatten(2))
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    return drafter.norm(x)


def block_loss(drafter: DFlashDrafter, target, states: torch.Tensor, ids: torch.Tensor,
               loss_mask: torch.Tensor, blocks: Blocks, gamma: float, final: torch.Tensor | None = None,
               distill: float = 0.0, vocab: DraftVocab | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The position-weighted cross-entropy of the blocks' drafts against the reply, and the
    acceptance curve of their greedy drafts on the device (blocks.acceptance_curve: tau is one plus its sum).
    The logits go through linear_loss.py, which never keeps them (gigabytes a sample).
    With distill W > 0 and the target's final hidden [b, S, H] (batch_states_and_final), the
    gradient follows W * the target's own next-token distribution + (1 - W) * the reply's token;
    the loss returned stays the hard-label one.
    With a drafter vocabulary (vocab.py) the drafts are scored over its tokens alone, through
    their rows of lm_head: a label outside it weighs nothing and is never a hit (the drafter
    cannot draft it), and a teacher's distribution is its softmax over the same tokens."""
    bs = drafter.config.block_size
    b, n = blocks.anchors.shape
    hidden = drafter_hidden(drafter, target.decoder.embed_tokens, states, ids, blocks)
    hidden = hidden.view(b, n, bs, -1)[:, :, 1:]  # position 0 holds the anchor: nothing to predict
    wanted, counted = labels(ids, loss_mask, blocks, bs)
    weights = (position_weights(bs, gamma, ids.device) * counted).flatten()
    lm_head = target.decoder.lm_head
    if getattr(lm_head, "bias", None) is not None:
        raise EngineError("DFlash training expects a target whose lm_head has no bias")
    teacher = teacher_rows(final, blocks, bs) if distill > 0.0 and final is not None else None
    head, targets = lm_head.weight, wanted.flatten()
    if vocab is not None:
        head, targets = vocab.head, vocab.index[targets]
        inside = targets >= 0
        weights, targets = weights * inside, targets.clamp(min=0)
    total, hits = linear_cross_entropy(hidden.flatten(0, 2), head, targets, weights, teacher=teacher,
                                       distill=distill)
    if vocab is not None:
        hits = hits & inside
    correct = hits.view_as(wanted) & counted
    return total / weights.sum().clamp(min=1e-6), acceptance_curve(correct, blocks.keep)
