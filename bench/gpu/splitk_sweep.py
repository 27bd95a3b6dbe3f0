"""Split-K for the verify step's products (engine/kernels/gemv.py's 16-row kernel), swept on the
lent GPU: the narrow matrices (o, down, q/k/v) have too few output tiles to keep every
multiprocessor streaming, so K is cut into splits whose partials the last split adds up.

For each shape, every layer's copy multiplied in one graph at 16 rows: microseconds per call for
cuBLAS, the one-row GEMV (what a decode step pays) and each (rows per program, K per
iteration, warps, stages, splits); replayed graphs are checked against torch (the split
counters must come back to zero). Usage there: python3 bench/gpu/splitk_sweep.py [seconds [model:part ...]]
SWEEP_GRID (a Python list of settings tuples) replaces the grid below. SWEEP_PARTS=1 sweeps
products left as split partials instead (`linear_parts`, a seventh element True), and times
the residual add + norm that sums them against the one that takes a whole bf16 product.
"""

import ast
import functools
import itertools
import os
import sys
import time

import attn_sweep  # beside this file
import torch

from engine.kernels.gemv import gemm16_config, gemv_config, launch, split_k
from engine.kernels.ops import add_rms_norm

SHAPES = {  # model: [(part, N, K, layers)]
    "qwen3-4b": [("o", 2560, 4096, 36), ("down", 2560, 9728, 36), ("qkv", 6144, 2560, 36),
                 ("gate_up", 19456, 2560, 36), ("lm_head", 151936, 2560, 1)],
    "qwen2.5-1.5b": [("o", 1536, 1536, 28), ("down", 1536, 8960, 28), ("qkv", 2048, 1536, 28),
                     ("gate_up", 17920, 1536, 28), ("lm_head", 151936, 1536, 1)],
}
GRID = [(bn, bk, 4, st, sp) for bn, (bk, st), sp in itertools.product(
    (16, 32), ((128, 4), (256, 3), (256, 4), (512, 4)), (1, 2, 3, 4))]
GRID += [(bn, 1024, w, st, 1) for bn, w, st in itertools.product((16, 32), (4, 8), (2, 3))]
GRID += [(32, 512, 8, st, sp) for st, sp in itertools.product((3, 4), (1, 2))]
# weights as the left operand (tiles of 64 or 128 output rows, so the matrix units take their
# natural shape), with K split to keep enough programs
GRID += [(bn, bk, 4, st, sp, True) for bn, (bk, st), sp in itertools.product(
    (64, 128), ((64, 4), (128, 3), (128, 4), (256, 3), (256, 4), (512, 2), (512, 3)), (1, 2, 4, 8))]
# left as partials: no fix-up, so splits are cheap; tiles of 16..64 output rows
PARTS_GRID = [(bn, bk, 4, st, sp, False, True) for bn, (bk, st), sp in itertools.product(
    (16, 32), ((128, 4), (256, 3), (512, 3)), (2, 3, 4))]
PARTS_GRID += [(64, bk, 4, st, sp, True, True) for (bk, st), sp in itertools.product(((128, 4), (256, 3)), (2, 3, 4, 6))]
if os.environ.get("SWEEP_PARTS"):
    GRID = PARTS_GRID
GRID = ast.literal_eval(os.environ["SWEEP_GRID"]) if "SWEEP_GRID" in os.environ else GRID


def us(fn, copies):
    return attn_sweep.time_graph(fn) * 1e3 / copies


def products(x, ws, out, config):
    for w in ws:
        launch(x, w, None, out, config=config)


def sweep(model, part, n, k, copies, deadline):
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5 for _ in range(copies)]
    x1 = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(16, k, device="cuda", dtype=torch.bfloat16)
    out1 = torch.empty(1, n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(16, n, device="cuda", dtype=torch.bfloat16)
    ref = torch.nn.functional.linear(x.double(), ws[-1].double())
    cublas = us(lambda: [torch.nn.functional.linear(x, w) for w in ws], copies)
    gemv = us(functools.partial(products, x1, ws, out1, gemv_config(n, k)), copies)
    results = []
    if os.environ.get("SWEEP_PARTS"):
        adds(n, copies)
    for cfg in GRID:
        if time.time() > deadline:
            break
        parts = len(cfg) == 7 and cfg[6]
        into = torch.empty(split_k(k, cfg[1], cfg[4])[1], 16, n, device="cuda") if parts else out
        try:
            t = us(functools.partial(products, x, ws, into, cfg), copies)
        except Exception as e:  # noqa: BLE001 - a setting the compiler refuses
            print(f"  {model} {part} {cfg}: {type(e).__name__}", flush=True)
            continue
        got = into.sum(0) if parts else out
        err = ((got.double() - ref).norm() / ref.norm()).item()  # after every replay
        if err > 1e-2:
            print(f"  {model} {part} {cfg}: WRONG after replays (rel err {err:.3g})", flush=True)
            continue
        results.append((t, cfg))
    results.sort()
    swapped = [r for r in results if len(r[1]) >= 6 and r[1][5]][:3]
    results = results[:5] + [r for r in swapped if r not in results[:5]]
    default = (*(gemm16_config(n, k) or ()), 1)[:5]
    now = [t for t, c in results if c == default]
    print(f"{model:13s} {part:5s} N={n:5d} K={k:5d} cuBLAS {cublas:6.2f}  gemv(1 row) {gemv:6.2f}  "
          f"default {default} {now[0] if now else '-'}  best: "
          + ", ".join(f"{t:.2f} {c}" for t, c in results), flush=True)


def adds(n, copies):
    """The residual add + norm after the product, us per call: a whole bf16 product, or S partials."""
    res = torch.randn(16, n, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(n, device="cuda", dtype=torch.bfloat16)
    line = []
    for s in (0, 2, 3, 4, 6):
        x = torch.randn(s, 16, n, device="cuda") if s else torch.randn(16, n, device="cuda", dtype=torch.bfloat16)
        line.append(f"{s or 'bf16'} {us(lambda x=x: [add_rms_norm(x, res, w, 1e-6) for _ in range(copies)], copies):.2f}")
    print(f"  add+norm of N={n}, by partials: " + "  ".join(line), flush=True)


def main():
    deadline = time.time() + float(sys.argv[1] if len(sys.argv) > 1 else 420)
    for model, parts in SHAPES.items():
        for part, n, k, copies in parts:
            if len(sys.argv) > 2 and f"{model}:{part}" not in sys.argv[2:]:
                continue
            sweep(model, part, n, k, copies, deadline)


if __name__ == "__main__":
    main()
