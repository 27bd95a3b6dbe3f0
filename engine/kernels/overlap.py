"""Programmatic dependent launch (Hopper and later): a step's kernels overlap their edges.

Inside a step's CUDA graph every kernel waits for the one before it to finish and flush, then
ramps up: launch, the first weight loads' trip to memory. For a small model that ramp is a
large part of each of its 200-odd kernels. With dependent launch a kernel is launched while
the one before it still runs: a one-row product loads what no step ever writes (its first weight
tile) at once, then waits on the grid before it (`gdc_wait`); every kernel reads activations and
writes only after that wait, so no read sees a stale value and no write lands under a reader. Right after that
wait it lets the kernel after it launch in turn (`gdc_launch_dependents`): two kernels in
flight at most, the one running and the next one loading its weights.

Every Triton kernel of a step takes the constexpr GDC, calls ops.wait_for_previous(GDC) before it
touches activations, and is launched with launch_pdl=GDC. This module decides, without Triton.
A kernel that is not launched this way (torch's own, or GDC off) orders as usual, and the wait
is then a no-op, so a mix is safe: what matters is that no kernel launched dependently touches
activations before its wait.

It is on where the device supports it (compute capability 9 or later, not under Triton's
interpreter); SPECCHAT_PDL=0 turns it off, SPECCHAT_PDL=decode keeps it to one-token steps.
Measured on the H200 (bench/RESULTS.md, seventh run): a decode step of the Qwen2.5-0.5B shape
0.769 -> 0.619 ms, the 1.5B's 1.398 -> 1.352. Except the attention kernels of longer steps
(`PLAIN_IN_LONGER_STEPS`): launched dependently they made the Qwen3-4B shape's 16-token step
3.176 ms, launched plainly 2.868 (0.5B and 1.5B shapes 0.884 -> 0.875 and 1.533 -> 1.523;
seventeenth run). SPECCHAT_PDL_SKIP names the kinds launched plainly in longer steps
(default "attention"; empty: none) for an A/B.

The same goes for the other way to take launches out of a step, `silu_epilogue`: the MLP's
SiLU(gate) * up computed in the gate/up product's epilogue (gemv.linear_silu) rather than by a
kernel of its own: one launch a layer fewer, 1.8-3.3 % off every step measured on the H200
(SPECCHAT_SILU_EPILOGUE=0 turns it off). Likewise RoPE and the K/V stores in a decode step's q/k/v
product (gemv.norm_linear_rope, for models without q/k norms): one launch a layer fewer, bit for
bit the two kernels'; off until measured on the GPU (SPECCHAT_ROPE_EPILOGUE=1 turns it on).
And a decode step's attention merging its splits in the program that finishes last instead of a
merge kernel (merge_in_attention), and its RoPE and K/V stores inside the attention kernel
(rope_in_attention, attention.rope_store_attend): one launch a layer fewer each; off until
measured (SPECCHAT_ATTN_MERGE=1, SPECCHAT_ATTN_ROPE=1 turn them on). Likewise the residual add
and RMSNorm before the MLP in o_proj's kernel, done by its last program (norm_after_o,
gemv.linear_add_norm; SPECCHAT_O_NORM=1), and the next layer's input norm (or the final norm) in
down_proj's (norm_after_down; SPECCHAT_DOWN_NORM=1). Measured on the H200 (bench/RESULTS.md,
thirteenth run), these four together cut a decode layer from 8 launches to 5 yet made every
decode step slower (0.5B shape 0.606 -> 0.946 ms, 1.5B 1.202 -> 1.716, 4B 2.619 -> 3.429), and
so did each combination tried, and each alone (fourteenth run: the merge in the last split
+0.23 / 0.59 / 0.67 ms on the three shapes, the norms +0.04 to 0.28, RoPE in attention +0.02 to
0.05). They stay off.
"""

from __future__ import annotations

import functools
import os

import torch

# kinds of kernel (attention, gemm16, ops) that steps of more than one token launch plainly:
# the split attention of a 16-token step on the Qwen3-4B shape took a tenth of the step longer
# launched dependently (H200, seventeenth run), the others measured faster launched dependently
PLAIN_IN_LONGER_STEPS = "attention"


@functools.cache
def _supported(index: int) -> bool:
    if os.environ.get("SPECCHAT_PDL", "1") == "0" or os.environ.get("TRITON_INTERPRET") == "1":
        return False
    try:  # Triton 3.3 and later launch dependently; an older one would refuse the option
        from triton.language.extra.cuda import gdc_wait  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.get_device_capability(index)[0] >= 9


def dependent_launch(device: torch.device) -> bool:
    """Whether the step kernels on this device launch dependently (GDC and launch_pdl)."""
    if device.type != "cuda":
        return False
    return _supported(device.index if device.index is not None else torch.cuda.current_device())


def launch_options(device: torch.device, rows: int, kind: str = "") -> dict:
    """The kernel arguments for a kernel of `kind` in a step of `rows` tokens: GDC (the kernel's
    constexpr) and, when on, launch_pdl. SPECCHAT_PDL=decode keeps it to one-token steps (the 4B shape's
    16-token verify step measured 2 % slower with it, its decode step 5 % faster)."""
    on = dependent_launch(device) and (rows == 1 or os.environ.get("SPECCHAT_PDL") != "decode")
    if on and rows > 1 and kind and kind in os.environ.get("SPECCHAT_PDL_SKIP", PLAIN_IN_LONGER_STEPS).split(","):
        on = False
    return {"GDC": True, "launch_pdl": True} if on else {"GDC": False}


@functools.cache
def silu_epilogue() -> bool:
    """Whether the fused layers take SiLU(gate) * up in the gate/up product (gemv.linear_silu)."""
    return os.environ.get("SPECCHAT_SILU_EPILOGUE", "1") != "0"


@functools.cache
def rope_epilogue() -> bool:
    """Whether a decode step's q/k/v product ends in RoPE and the K/V stores (gemv.norm_linear_rope)."""
    return os.environ.get("SPECCHAT_ROPE_EPILOGUE", "0") == "1"


@functools.cache
def merge_in_attention() -> bool:
    """Whether a decode step's attention merges its splits in the split kernel's last program
    (attention.py) instead of a kernel of its own."""
    return os.environ.get("SPECCHAT_ATTN_MERGE", "0") == "1"


@functools.cache
def rope_in_attention() -> bool:
    """Whether a decode step's RoPE and K/V stores run inside its attention kernel
    (attention.rope_store_attend) instead of a kernel of their own (ops.qk_rope_store)."""
    return os.environ.get("SPECCHAT_ATTN_ROPE", "0") == "1"


@functools.cache
def norm_after_o() -> bool:
    """Whether a decode step's residual add and RMSNorm after attention ride in o_proj's kernel
    (gemv.linear_add_norm) instead of a kernel of their own (ops.add_rms_norm)."""
    return os.environ.get("SPECCHAT_O_NORM", "0") == "1"


@functools.cache
def norm_after_down() -> bool:
    """Whether a decode step's every layer ends in the norm that comes next (the next layer's
    input norm, or the final norm) in down_proj's kernel (gemv.linear_add_norm)."""
    return os.environ.get("SPECCHAT_DOWN_NORM", "0") == "1"


def launch_label(device: torch.device) -> str:
    """Which of them are on, for a benchmark's title ("" where none is)."""
    on = [(dependent_launch(device), "dependent launch"), (silu_epilogue(), "SiLU in the gate/up epilogue"),
          (rope_epilogue(), "RoPE in the q/k/v epilogue"),
          (merge_in_attention(), "attention merged in its last split"),
          (rope_in_attention(), "RoPE in the attention kernel"), (norm_after_o(), "the MLP's norm in o_proj"),
          (norm_after_down(), "the next norm in down_proj")]
    return "".join(f", {what}" for yes, what in on if yes)
