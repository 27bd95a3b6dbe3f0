"""The residual add + RMSNorm (engine/kernels/ops.py) swept on the lent GPU: warps for a whole bf16
product of 1 or 16 rows, and for 16 rows left as 3, 4 or 6 split partials (`linear_parts`);
us per call, 36 calls in one graph. Usage there: PYTHONPATH=. python3 bench/gpu/add_sweep.py
"""

import functools

import attn_sweep  # beside this file
import torch
import triton

from engine.kernels.ops import _add_rms_norm

COPIES = 36


def add(x, res, w, out, parts, warps):
    t, n = res.shape
    _add_rms_norm[(t,)](x, res, w, out, n, t * n, 1e-6, HAS_RES=True, PARTS=parts, BLOCK=triton.next_power_of_2(n),
                        num_warps=warps)


def us(*args):
    f = functools.partial(add, *args)
    return attn_sweep.time_graph(lambda: [f() for _ in range(COPIES)]) * 1e3 / COPIES


def main():
    for n in (2560, 1536):
        w = torch.ones(n, device="cuda", dtype=torch.bfloat16)
        line = []
        for t in (1, 16):
            res = torch.randn(t, n, device="cuda", dtype=torch.bfloat16)
            whole = torch.randn(t, n, device="cuda", dtype=torch.bfloat16)
            for warps in (4, 8, 16, 32):
                line.append(f"t{t}/bf16/w{warps} {us(whole, res, w, torch.empty_like(res), 1, warps):.2f}")
        res = torch.randn(16, n, device="cuda", dtype=torch.bfloat16)
        for parts in (3, 4, 6):
            x = torch.randn(parts, 16, n, device="cuda")
            for warps in (8, 16, 32):
                line.append(f"{parts}/w{warps} {us(x, res, w, torch.empty_like(res), parts, warps):.2f}")
        print(f"N={n}: " + "  ".join(line), flush=True)


if __name__ == "__main__":
    main()
