"""`specchat bench steps`: the step profiler's figures for one model, as a table (and JSON)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from engine import EngineError, launch_label, load_model, preset, profile_steps, random_model


def bench_steps(args) -> int:
    if not torch.cuda.is_available():
        raise EngineError("the step bench needs a CUDA GPU")
    room = max(args.contexts) + 64
    if args.random:
        model = random_model(preset(args.random), device="cuda", dtype=torch.bfloat16, max_context=room,
                             batch_invariant=args.batch_invariant)
        name = f"{args.random}-shaped (random bf16)"
    else:
        model = load_model(args.model, device="cuda", dtype="bfloat16", max_context=room,
                           batch_invariant=args.batch_invariant)
        name = f"{model.name} (bf16)"
    if args.batch_invariant:
        name += ", batch-invariant steps"
    name += launch_label(torch.device("cuda"))
    result = profile_steps(model, name, args.contexts, args.lengths, args.repeats,
                           eager=not args.no_eager, transformers=not args.no_transformers,
                           drafter=args.drafter_pass)
    print_report(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


def print_report(r: dict) -> None:
    floor = r["floor_ms"]
    print(f"\n{r['model']} on {r['device']}, {r['date']}")
    print(f"weights {r['weight_bytes'] / 1e9:.2f} GB, copy {r['copy_gbps']:,.0f} GB/s -> floor {floor:.3f} ms")
    head = f"{'context':>7} {'tokens':>6} {'graph ms':>9} {'x floor':>7} {'x decode':>8} {'host ms':>8}"
    head += f" {'eager ms':>9} {'transformers ms':>15} {'x floor':>7}"
    print(head)
    for key, row in r["steps"].items():
        context, t = key.split("/")
        decode = r["steps"][f"{context}/1"]["graph_ms"]
        eager = r.get("eager", {}).get(key)
        hf = r.get("transformers", {}).get(key)
        line = f"{context:>7} {t:>6} {row['graph_ms']:9.3f} {row['graph_ms'] / floor:7.2f}"
        line += f" {row['graph_ms'] / decode:8.3f} {row['host_ms']:8.3f}"
        line += f" {eager:9.3f}" if eager else f" {'':>9}"
        line += f" {hf:15.2f} {hf / floor:7.1f}" if hf else ""
        print(line)
    for n, ms in r.get("chain_ms", {}).items():
        print(f"chain of {n} one-token steps (a draft model's proposal of {n}): {ms:.3f} ms")
    for drafter, ms in r.get("drafter_pass_ms", {}).items():
        drafter = f"{drafter} layers, whole vocabulary" if str(drafter).isdigit() else drafter  # older files
        print(f"DFlash drafter pass ({drafter}, random weights): {ms:.3f} ms")
    for t, ms in r["linears_ms"].items():
        print(f"cuBLAS linears alone, one graph, {t} token(s): {ms:.3f} ms = {ms / floor:.2f}x floor")
    for t, p in r["parts"].items():
        kinds = ", ".join(f"{k} {ms:.3f}" for k, ms in p.items() if k not in ("span", "kernels", "rest_ms"))
        print(f"{t}-token step at {next(iter(r['steps'])).split('/')[0]} context, ms: {kinds} "
              f"(span {p['span']:.3f}, {p['kernels']:.0f} kernels)")
    for t, p in r["parts"].items():
        print(f"rest of the {t}-token step, ms:", "; ".join(f"{n} {ms:.4f}" for n, ms in p["rest_ms"].items()))
