"""Launch settings of the step linears (engine/kernels/gemv.py) swept on the lent GPU.

For each weight shape of a model, every layer's copy of it (distinct weights, so nothing is
served from L2) multiplied in one graph, as in a step: microseconds per call for cuBLAS and for
each (rows per program, K per iteration, warps, stages), at 1 and 16 activation rows. Prints the
best settings per shape and the sum over a step. Usage there: python3 bench/gpu/gemv_sweep.py
"""

import itertools
import json
import os
import sys

import attn_sweep  # beside this file
import torch

from engine.kernels.gemv import gemm16_config, gemv_config
from engine.kernels.gemv import launch as run

MODELS = {  # name: (layers, hidden, q+2kv, intermediate, vocab, qkv bias)
    "qwen2.5-1.5b": (28, 1536, 2048, 8960, 151936, True),
    "qwen3-4b": (36, 2560, 6144, 9728, 151936, False),
    "qwen2.5-0.5b": (24, 896, 1152, 4864, 151936, True),
}


def time_graph(fn) -> float:
    """Median microseconds of one replay of fn captured as a graph."""
    return attn_sweep.time_graph(fn) * 1e3


def shapes(name):
    layers, h, qkv, inter, vocab, bias = MODELS[name]
    return [("qkv", qkv, h, layers, bias), ("o", h, h if name != "qwen3-4b" else 4096, layers, False),
            ("gate_up", 2 * inter, h, layers, False), ("down", h, inter, layers, False),
            ("lm_head", vocab, h, 1, False)]


def launch(t, x, w, b, out, n, k, cfg):
    run(x, w, b, out, config=cfg)


GRID = {
    1: list(itertools.product((2, 4, 8), (512, 1024), (4,), (3,))),
    16: list(itertools.product((16, 32), (256, 512), (4,), (2, 4))),
}


def folds(name):
    """One row's residual add + RMSNorm before q/k/v and before gate/up: separate kernels against
    the norm folded into the product, every layer's weights in one graph."""
    from engine.kernels import gemv as g
    from engine.kernels.ops import add_rms_norm

    layers, h, qkv, inter, _, bias = MODELS[name]
    x, r, s = (torch.randn(1, h, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    nw = torch.ones(h, device="cuda", dtype=torch.bfloat16)
    for part, n in (("qkv", qkv), ("gate_up", 2 * inter)):
        ws = [torch.randn(n, h, device="cuda", dtype=torch.bfloat16) for _ in range(layers)]
        b = torch.randn(n, device="cuda", dtype=torch.bfloat16) if bias and part == "qkv" else None
        out = torch.empty(1, n, device="cuda", dtype=torch.bfloat16)
        apart = time_graph(lambda: [g.linear(add_rms_norm(x, r, nw, 1e-6)[0], w, b) for w in ws]) / layers
        folded = time_graph(lambda: [g.launch(x, w, b, out, g.NORM, r, nw, s, 1e-6) for w in ws]) / layers
        print(f"{name:13s} norm + {part:8s}: apart {apart:6.2f} us, folded {folded:6.2f} us", flush=True)


def main():
    names = sys.argv[1:] or list(MODELS)
    for name in names:
        folds(name)
    best_all = {}
    for name in names:
        total = {1: [0.0, 0.0], 16: [0.0, 0.0]}
        for part, n, k, copies, bias in shapes(name):
            ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5 for _ in range(copies)]
            bs = [torch.randn(n, device="cuda", dtype=torch.bfloat16) if bias else None for _ in range(copies)]
            for t in (1, 16):
                x = torch.randn(t, k, device="cuda", dtype=torch.bfloat16)
                out = torch.empty(t, n, device="cuda", dtype=torch.bfloat16)
                ref = torch.nn.functional.linear(x, ws[0], bs[0]).float()
                cublas = time_graph(lambda: [torch.nn.functional.linear(x, w, b) for w, b in zip(ws, bs)]) / copies
                results = []
                for cfg in GRID[t]:
                    try:
                        launch(t, x, ws[0], bs[0], out, n, k, cfg)
                        err = ((out.float() - ref).norm() / ref.norm()).item()
                        if err > 1e-2:
                            print(f"  {name} {part} t={t} {cfg}: wrong (rel err {err:.3g})")
                            continue
                        us = time_graph(lambda: [launch(t, x, w, b, out, n, k, cfg) for w, b in zip(ws, bs)]) / copies
                        results.append((us, cfg))
                    except Exception as e:  # a setting the compiler refuses (registers, shared memory)
                        print(f"  {name} {part} t={t} {cfg}: {type(e).__name__}")
                default = (gemv_config if t == 1 else gemm16_config)(n, k)
                chosen = [us for us, cfg in results if cfg == default]
                results.sort()
                us, cfg = results[0]
                floor = n * k * 2 / 4.265e6  # us at the copy rate measured on this GPU kind
                print(f"{name:13s} {part:8s} t={t:2d} N={n:6d} K={k:5d}  cuBLAS {cublas:7.2f} us  ours {us:7.2f} us "
                      f"{cfg}  default {default} {chosen[0] if chosen else '-'}  floor {floor:6.2f}  next: {[(round(u, 2), c) for u, c in results[1:4]]}", flush=True)
                best_all[f"{name}/{part}/{t}"] = {"cfg": cfg, "us": us, "cublas_us": cublas, "floor_us": floor}
                total[t][0] += cublas * copies
                total[t][1] += us * copies
            del ws, bs
        for t in (1, 16):
            print(f"{name} t={t}: linears of a step, cuBLAS {total[t][0] / 1e3:.3f} ms, ours {total[t][1] / 1e3:.3f} ms")
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, "gemv-sweep.json"), "w") as f:
        json.dump(best_all, f, indent=1)


if __name__ == "__main__":
    main()
