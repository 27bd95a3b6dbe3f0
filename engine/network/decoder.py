"""The decoder: one implementation for Llama (SmolLM2), Qwen2/2.5 (q/k/v bias) and Qwen3 (q/k RMSNorm).

Batch size one: a step is a run of T tokens at consecutive positions of one sequence.
Weights are fused where a step would otherwise launch several matmuls on the same input
(q/k/v into qkv_proj, gate/up into gate_up_proj); `load_hf_state` takes the usual HF names.

Two paths compute the same function. `forward` is the torch reference (any device, equal to
transformers in float32). With ctx.backend "triton" (CUDA) the layers run `fused_forward`: the
residual add rides in the next RMSNorm's kernel, q/k norm + RoPE + the K/V write are one
kernel, SiLU * up another, attention reads the paged cache in place, and the linear layers of
steps up to 16 tokens run the step kernels of engine/kernels/gemv.py on the same weights.
"""

from __future__ import annotations

import functools
import importlib.util

import torch
import torch.nn.functional as F
from torch import nn

from engine.errors import EngineError
from engine.network.config import ModelConfig
from engine.runtime.attention import attend, paged_attention
from engine.runtime.step_io import StepContext


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)

    def add_forward(self, x: torch.Tensor, residual: torch.Tensor | None, tap: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Fused (CUDA): (norm(residual + x), residual + x), the sum written into residual (and
        into tap, where given)."""
        from engine.kernels.ops import add_rms_norm

        return add_rms_norm(x, residual, self.weight, self.eps, tap)


def fast_linear(module: nn.Linear, x: torch.Tensor, invariant: bool = False,
                out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The module's product through the step kernels (CUDA: 1..16 rows; more go to cuBLAS)."""
    from engine.kernels.gemv import linear

    return linear(x, module.weight, module.bias, invariant, out_dtype)


@functools.cache
def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def rope_frequencies(head_dim: int, theta: float, device) -> torch.Tensor:
    """RoPE's inverse frequencies [head_dim / 2], in float32 (a buffer would be rounded by .to())."""
    dims = torch.arange(0, head_dim, 2, dtype=torch.float, device=device)
    return 1.0 / theta ** (dims / head_dim)


def rope_tables(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [T, head_dim] for rotate-half RoPE at positions [T], computed in float32."""
    freqs = positions.float()[:, None] * rope_frequencies(head_dim, theta, positions.device)[None, :]
    angles = torch.cat((freqs, freqs), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def one_token(t: int, ctx: StepContext) -> bool:
    """Whether a step of t tokens is one token of one sequence that need not be batch-invariant:
    the steps whose kernels can end in the next one's work (gemv.norm_linear_rope,
    attention.rope_store_attend, gemv.linear_add_norm)."""
    return t == 1 and ctx.batch is None and ctx.invariant_chunk == 0


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE. x: [T, heads, D]; cos, sin: [T, D]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.layer = layer
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_size = cfg.num_heads * cfg.head_dim
        self.kv_size = cfg.num_kv_heads * cfg.head_dim
        self.qkv_proj = nn.Linear(cfg.hidden_size, self.q_size + 2 * self.kv_size, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(self.q_size, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.scale = cfg.head_dim**-0.5

    def forward(self, x, cos, sin, ctx: StepContext) -> torch.Tensor:
        t = x.shape[0]
        q, k, v = self.qkv_proj(x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(t, self.num_heads, self.head_dim)
        k = k.view(t, self.num_kv_heads, self.head_dim)
        v = v.view(t, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        out = paged_attention(q, k, v, self.layer, ctx, self.scale)
        return self.o_proj(out.reshape(t, self.q_size))

    def fused_forward(self, qkv, positions: torch.Tensor, inv_freq: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        """From the q/k/v projection on: q/k norm, RoPE and the K/V write, attention ([T, H, D],
        before o_proj)."""
        from engine.kernels.attention import rope_store_attend
        from engine.kernels.ops import qk_rope_store
        from engine.kernels.overlap import rope_in_attention

        norm = self.q_norm is not None
        if one_token(qkv.shape[0], ctx) and rope_in_attention():
            return rope_store_attend(
                qkv, inv_freq, self.q_norm.weight if norm else None, self.k_norm.weight if norm else None,
                self.q_norm.eps if norm else 0.0, ctx.pool.k[self.layer], ctx.pool.v[self.layer], ctx.page_table,
                ctx.start, ctx.pool.page_size, self.num_heads, self.scale,
            )
        q = qk_rope_store(
            qkv, positions, inv_freq, self.q_norm.weight if norm else None,
            self.k_norm.weight if norm else None, self.q_norm.eps if norm else 0.0,
            ctx.pool.k[self.layer], ctx.pool.v[self.layer], ctx.page_table, ctx.pool.page_size, self.num_heads,
            None if ctx.batch is None else ctx.batch.rows,
        )
        return attend(q, self.layer, ctx, self.scale)

    def rope_in_epilogue(self, x: torch.Tensor, ctx: StepContext) -> bool:
        """Whether this step's q/k/v product can end in RoPE and the K/V stores (`norm_linear_rope`):
        one token of one sequence, no q/k norm (it needs a whole head per program), not batch-invariant,
        and a product the GEMV takes unfused too (so the fused kernel's sums are its own)."""
        from engine.kernels.overlap import rope_epilogue

        # from 16384 rows on, one row goes to the matrix units or cuBLAS (gemv.launch, gemv._fits)
        return (one_token(x.shape[-2], ctx) and self.q_norm is None  # x may be split partials [S, T, K]
                and self.qkv_proj.out_features < 16384 and rope_epilogue())

    def norm_in_o(self, out: torch.Tensor, ctx: StepContext) -> bool:
        """Whether o_proj can end in the residual add and RMSNorm before the MLP
        (`gemv.linear_add_norm`): one token of one sequence, not batch-invariant."""
        from engine.kernels.overlap import norm_after_o

        return one_token(out.shape[0], ctx) and norm_after_o()

    def project(self, out: torch.Tensor, invariant: bool = False) -> torch.Tensor:
        """o_proj of the attention's output [T, H, D]."""
        from engine.kernels.gemv import linear_parts

        # its one reader, the residual add in DecoderLayer.fused_forward, takes split partials
        return linear_parts(out.reshape(out.shape[0], self.q_size), self.o_proj.weight, self.o_proj.bias, invariant)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)



class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, layer)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, ctx: StepContext) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, ctx)
        return x + self.mlp(self.post_attention_layernorm(x))

    def fused_forward(self, x, residual, positions, inv_freq, ctx: StepContext, tap: torch.Tensor | None = None,
                      normed: bool = False, next_norm: RMSNorm | None = None, next_tap: torch.Tensor | None = None):
        """x: the previous block's output, residual: the stream before it (None at layer 0).
        Returns this layer's MLP output and the stream before it. The outputs of o and down may
        be float32 split partials [S, T, N] (`triton_gemv.linear_parts`), which the residual add
        after them sums (`triton_ops.add_rms_norm`: through `norm_linear` in the next block, or
        the final norm). tap: where the stream entering this layer (residual + x) is kept as well,
        by the add that computes it.

        One-token steps can end each layer in the next one's norm (`Decoder.norm_after_down`):
        given next_norm (the next layer's input norm, or the final norm) down_proj's kernel adds
        the stream, keeps it in next_tap where given, and norms it, and the layer returns (its
        output normed, the stream after it); the next layer, told normed, starts at its q/k/v."""
        from engine.kernels.gemv import (
            linear,
            linear_add_norm,
            linear_parts,
            linear_silu,
            norm_linear,
            norm_linear_rope,
        )
        from engine.kernels.ops import silu_mul
        from engine.kernels.overlap import silu_epilogue

        attn, mlp = self.self_attn, self.mlp
        invariant = ctx.invariant_chunk > 0  # batch-invariant steps: every row computed alike
        norm = self.input_layernorm
        if normed:  # the layer before ended in this layer's norm
            out = attn.fused_forward(linear(x, attn.qkv_proj.weight, attn.qkv_proj.bias), positions, inv_freq, ctx)
        elif attn.rope_in_epilogue(x, ctx):
            q, residual = norm_linear_rope(x, residual, norm.weight, norm.eps, attn.qkv_proj.weight,
                                           attn.qkv_proj.bias, positions, inv_freq, ctx.pool.k[attn.layer],
                                           ctx.pool.v[attn.layer], ctx.page_table, ctx.pool.page_size,
                                           attn.num_heads, tap=tap)
            out = attend(q, attn.layer, ctx, attn.scale)
        else:
            qkv, residual = norm_linear(x, residual, norm.weight, norm.eps, attn.qkv_proj.weight,
                                        attn.qkv_proj.bias, invariant, tap=tap)
            out = attn.fused_forward(qkv, positions, inv_freq, ctx)
        norm = self.post_attention_layernorm
        fused = silu_epilogue()  # SiLU(gate) * up in the gate/up product's epilogue
        if attn.norm_in_o(out, ctx):
            h, residual = linear_add_norm(out.reshape(1, attn.q_size), attn.o_proj.weight, attn.o_proj.bias,
                                          residual, norm.weight, norm.eps)
            act = linear_silu(h, mlp.gate_up_proj.weight) if fused else silu_mul(linear(h, mlp.gate_up_proj.weight))
        else:
            act, residual = norm_linear(attn.project(out, invariant), residual, norm.weight, norm.eps,
                                        mlp.gate_up_proj.weight, None, invariant, silu=fused)
            act = act if fused else silu_mul(act)
        if next_norm is not None:
            return linear_add_norm(act, mlp.down_proj.weight, None, residual, next_norm.weight, next_norm.eps,
                                   tap=next_tap)
        return linear_parts(act, mlp.down_proj.weight, None, invariant), residual


class Decoder(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.batch_invariant = False  # set by Model: every step of 1..16 rows computes each row alike
        self._inv_freq: dict[torch.device, torch.Tensor] = {}

    def inv_freq(self, device: torch.device) -> torch.Tensor:
        """RoPE frequencies for the fused layers, once per device (kept off the module: .to()
        would round a buffer)."""
        if device not in self._inv_freq:
            self._inv_freq[device] = rope_frequencies(self.config.head_dim, self.config.rope_theta, device)
        return self._inv_freq[device]

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """The fused paths' embedding lookup: a gather over every element at once. nn.Embedding's
        index_select walks a step's rows one after another (16 rows on the H200: 13.3 us against
        2.1; one row: 2.5 against 4.2 us, which the decode step's time did not show)."""
        return self.embed_tokens.weight[ids]

    def forward(
        self,
        ids: torch.Tensor,  # [T]
        positions: torch.Tensor,  # [T]
        ctx: StepContext,
        state_layers: tuple[int, ...] = (),
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Final-normed hidden states [T, H]; with `state_layers`, also the residual stream after each
        listed layer, concatenated [T, len(state_layers) * H] (what a DFlash drafter reads)."""
        if ctx.backend == "triton":
            return self.fused_forward(ids, positions, ctx, state_layers)
        x = self.embed_tokens(ids)
        cos, sin = rope_tables(positions, self.config.head_dim, self.config.rope_theta, x.dtype)
        states = []
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, ctx)
            if i in state_layers:
                states.append(x)
        hidden = self.norm(x)
        if state_layers:
            return hidden, torch.cat(states, dim=-1)
        return hidden

    def fused_forward(self, ids, positions, ctx: StepContext, state_layers: tuple[int, ...] = ()):
        x, residual = self.embed(ids), None
        inv_freq = self.inv_freq(x.device)
        # The stream after layer i is residual + x, which the next layer's first add computes
        # (or the final norm's): that kernel writes it into the states as well, in place of an
        # add and a concatenation of their own between the fused kernels.
        h = self.config.hidden_size
        tapped, tap = sorted(set(state_layers)), None  # each once, in layer order, as `forward` keeps them
        states = x.new_empty((x.shape[0], len(tapped) * h)) if tapped else None
        if self.norm_after_down(x, ctx):  # each layer's down_proj computes, keeps and norms the stream after it
            for i, layer in enumerate(self.layers):
                j = tapped.index(i) if i in tapped else None
                after = self.layers[i + 1].input_layernorm if i + 1 < len(self.layers) else self.norm
                x, residual = layer.fused_forward(x, residual, positions, inv_freq, ctx, normed=i > 0, next_norm=after,
                                                  next_tap=None if j is None else states[:, j * h : (j + 1) * h])
            return (x, states) if state_layers else x
        for i, layer in enumerate(self.layers):
            x, residual = layer.fused_forward(x, residual, positions, inv_freq, ctx, tap=tap)
            j = tapped.index(i) if i in tapped else None
            tap = None if j is None else states[:, j * h : (j + 1) * h]
        hidden, _ = self.norm.add_forward(x, residual, tap)
        if state_layers:
            return hidden, states
        return hidden

    def norm_after_down(self, x: torch.Tensor, ctx: StepContext) -> bool:
        """Whether each layer's down_proj ends in the next norm (`gemv.linear_add_norm`): one
        token of one sequence, not batch-invariant, and no RoPE in the q/k/v epilogue (whose
        kernel does the norm it would skip)."""
        from engine.kernels.overlap import norm_after_down, rope_epilogue

        return one_token(x.shape[0], ctx) and norm_after_down() and not rope_epilogue()

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if hidden.is_cuda and triton_available():
            return fast_linear(self.lm_head, hidden, self.batch_invariant, torch.float32)
        return self.lm_head(hidden).float()

    @torch.no_grad()
    def load_hf_state(self, tensors: dict[str, torch.Tensor]) -> None:
        """Copy weights given under transformers' names (model.layers.0.self_attn.q_proj.weight, ...)."""
        tensors = {k.removeprefix("model."): v for k, v in tensors.items()}
        own = dict(self.named_parameters())

        def take(name: str) -> torch.Tensor:
            if name not in tensors:
                raise EngineError(f"weights are missing {name!r}: the file does not match this architecture")
            return tensors.pop(name)

        def put(name: str, value: torch.Tensor) -> None:
            target = own[name]
            if target.shape != value.shape:
                raise EngineError(f"weight {name} has shape {tuple(value.shape)}, expected {tuple(target.shape)}")
            target.copy_(value)

        cfg = self.config
        put("embed_tokens.weight", take("embed_tokens.weight"))
        put("norm.weight", take("norm.weight"))
        if not cfg.tie_word_embeddings:
            put("lm_head.weight", take("lm_head.weight"))
        tensors.pop("lm_head.weight", None)
        for i in range(cfg.num_layers):
            p = f"layers.{i}."
            for norm in ("input_layernorm", "post_attention_layernorm"):
                put(p + norm + ".weight", take(p + norm + ".weight"))
            a = p + "self_attn."
            put(a + "qkv_proj.weight", torch.cat([take(a + f"{x}_proj.weight") for x in "qkv"]))
            if cfg.qkv_bias:
                put(a + "qkv_proj.bias", torch.cat([take(a + f"{x}_proj.bias") for x in "qkv"]))
            put(a + "o_proj.weight", take(a + "o_proj.weight"))
            if cfg.qk_norm:
                put(a + "q_norm.weight", take(a + "q_norm.weight"))
                put(a + "k_norm.weight", take(a + "k_norm.weight"))
            m = p + "mlp."
            put(m + "gate_up_proj.weight", torch.cat([take(m + "gate_proj.weight"), take(m + "up_proj.weight")]))
            put(m + "down_proj.weight", take(m + "down_proj.weight"))
        leftover = [k for k in tensors if "rotary_emb" not in k]
        if leftover:
            raise EngineError(f"weights hold {len(leftover)} tensors this architecture has no place for, "
                              f"e.g. {leftover[0]!r}")
