"""The step profiler (`specchat bench steps`): how long one decode or verify step takes, next to what
bounds it.

For one model (random weights of a preset shape, or a real one), at each context length: the
median device time of the graph-captured step of 1, 2, 4, 8 and 16 tokens, the whole step seen
from the host (inputs in, sampled ids out), the eager step, and transformers' eager forward of
the same weights with a KV cache. Beside them, measured in the same run: the floor (weight
bytes over the device's copy bandwidth), cuBLAS's linear layers alone replayed as one graph,
a chain of 15 one-token steps (a draft model's proposal), a DFlash drafter's pass, and where the
time of a graph step goes (profiled kernels by kind, and the gaps between them).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from engine.errors import EngineError
from engine.limits import DEFAULT_DRAFT_VOCAB
from engine.loading.gguf_convert import hf_config
from engine.runtime.model import Model
from engine.runtime.sampling import GREEDY

CHAIN = 15  # one-token steps of a chain: a draft model's longest proposal
DRAFTER_LAYERS = (2, 5)  # DFlash drafters timed: train-dflash's default depth, z-lab's published one,
# each over the whole vocabulary (z-lab's) and over train-dflash's default drafter vocabulary
KINDS = {  # kernel name fragments -> part of a step
    "attention": ("_attend_split", "_merge_splits"),
    "norm/rope/act": ("_add_rms_norm", "_silu_mul", "_qk_rope_store"),
    "linears": ("gemm", "gemv", "nvjet", "xmma", "cutlass", "splitk", "sm90"),
}


def profile_steps(model: Model, name: str, contexts: list[int], lengths: list[int], repeats: int,
                  eager: bool = True, transformers: bool = True, drafter: bool = False) -> dict:
    """Every figure of the step bench for `model` (on CUDA, with room for max(contexts) + 64 tokens)."""
    room = max(contexts) + 64
    for cache in (model.pool.k, model.pool.v):
        cache.normal_()  # never time on zeros
    result = {"model": name, "date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name()}
    result["weight_bytes"] = weight_bytes(model)
    result["copy_gbps"] = copy_bandwidth() / 1e9
    result["floor_ms"] = result["weight_bytes"] / (result["copy_gbps"] * 1e9) * 1e3
    result["steps"] = time_steps(model, contexts, lengths, repeats)
    if eager:
        eager_model = Model(model.decoder, model.config, name=model.name, max_context=room, eager=True)
        eager_model.pool.k.normal_()
        eager_model.pool.v.normal_()
        result["eager"] = time_eager(eager_model, contexts, [1, max(lengths)], max(5, repeats // 5))
        del eager_model
    result["chain_ms"] = {CHAIN: chain_ms(model, contexts[0], CHAIN, max(5, repeats // 5))}
    if drafter:  # (a random drafter is made on the CPU and written out first: seconds for a 4B's)
        result["drafter_pass_ms"] = {
            drafter_key(layers, vocab): drafter_pass_ms(model, contexts[0], max(5, repeats // 5), layers, vocab)
            for layers in DRAFTER_LAYERS for vocab in (0, DEFAULT_DRAFT_VOCAB)}
    result["linears_ms"] = {t: linears_graph_ms(model, t, repeats) for t in (1, max(lengths))}
    result["parts"] = {t: step_parts(model, contexts[0], t) for t in (1, max(lengths))}
    if transformers:
        result["transformers"] = time_transformers(model, contexts, lengths, 10)
    return result


def weight_bytes(model: Model) -> int:
    """Bytes one decode step must read: every weight once, the lm_head whole, one embedding row."""
    dec = model.decoder
    total = sum(p.numel() * p.element_size() for p in {id(p): p for p in dec.parameters()}.values())
    emb = dec.embed_tokens.weight
    row = emb.shape[1] * emb.element_size()
    if dec.lm_head.weight is emb:
        return total + row
    return total - emb.numel() * emb.element_size() + row


def copy_bandwidth() -> float:
    """Device-to-device copy rate in bytes/s, read plus write (2 GiB copied)."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), 20)
    return 2 * src.numel() / (ms / 1e3)


def median_ms(fn, repeats: int, warmup: int = 3) -> float:
    """Median device time of fn, each call between its own pair of events."""
    for _ in range(warmup):
        fn()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for start, end in pairs:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in pairs)


def host_ms(fn, repeats: int, warmup: int = 3) -> float:
    """Median wall time of fn, which ends by reading its result back (a sync)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def step_fn(model: Model, seq, t: int, context: int):
    ids = torch.randint(0, model.config.vocab_size, (t,)).tolist()

    def step():
        out = model.step(seq, ids, GREEDY)
        out.tokens.tolist()
        seq.truncate(context)

    return step


def steps_of(model: Model, contexts, lengths):
    """("context/length", step) for each pair: one sequence per context, filled to it and kept there."""
    for context in contexts:
        seq = model.new_sequence()
        seq.append(context)
        try:
            for t in lengths:
                yield f"{context}/{t}", step_fn(model, seq, t, context)
        finally:
            seq.release()


def time_steps(model: Model, contexts, lengths, repeats: int) -> dict:
    rows = {}
    for key, step in steps_of(model, contexts, lengths):
        step()  # captures the graph and loads its inputs
        graph = model.graphs.last
        rows[key] = {"graph_ms": median_ms(graph.replay, repeats), "host_ms": host_ms(step, repeats)}
    return rows


def chain_ms(model: Model, context: int, n: int, repeats: int) -> float:
    """Device time of n chained one-token steps at `context`, each fed the token the one before
    sampled: what a draft model's proposal of n drafts costs (host enqueueing included)."""
    seq = model.new_sequence()
    seq.append(context)
    first = torch.tensor([3], device=model.device)

    def chain():
        model.chain(seq, first, n, GREEDY)
        seq.truncate(context)

    try:
        return median_ms(chain, repeats)
    finally:
        seq.release()


def drafter_key(layers: int, vocab: int) -> str:
    """How the step bench names a drafter it timed."""
    return f"{layers} layers, " + (f"{vocab:,}-token vocabulary" if vocab else "whole vocabulary")


def drafter_pass_ms(model: Model, context: int, repeats: int, layers: int, vocab: int = 0) -> float:
    """Device time of a DFlash drafter's pass for this model (random weights, `layers` layers of
    the target's shape, drafting over `vocab` of its tokens, 0: all), `context` tokens into a
    reply: the proposal of a whole block, the one new token's states taken in first, as each
    drafting step does."""
    import tempfile
    from pathlib import Path

    from engine.speculation.proposers.dflash.files import write_random_drafter
    from engine.speculation.proposers.spec import ProposerOptions
    from engine.speculation.registry import load_proposer

    with tempfile.TemporaryDirectory() as tmp:  # weights read while it exists
        folder = write_random_drafter(Path(tmp) / "drafter", model, num_layers=layers, draft_vocab=vocab)
        proposer = load_proposer("dflash", model, ProposerOptions({"dflash": str(folder)})).make()
        proposer.attach(model, GREEDY)
    try:
        width = len(model.state_layers) * model.config.hidden_size
        ids = [3] * context
        proposer.reset(ids, torch.randn(context - 1, width, device=model.device, dtype=model.dtype))
        one = torch.randn(1, width, device=model.device, dtype=model.dtype)

        def drafter_pass():
            ids.append(3)
            proposer.observe(ids, one)
            proposer.propose(ids, proposer.max_k)

        return median_ms(drafter_pass, repeats)
    finally:
        proposer.detach(model)


def time_eager(model: Model, contexts, lengths, repeats: int) -> dict:
    return {key: host_ms(step, repeats) for key, step in steps_of(model, contexts, lengths)}


def linears_graph_ms(model: Model, t: int, repeats: int) -> float:
    """cuBLAS alone: every linear layer of a step (lm_head included) replayed as one graph."""
    dec, cfg = model.decoder, model.config
    x = torch.randn(t, cfg.hidden_size, device="cuda", dtype=model.dtype)
    attn_out = torch.randn(t, cfg.num_heads * cfg.head_dim, device="cuda", dtype=model.dtype)
    act = torch.randn(t, cfg.intermediate_size, device="cuda", dtype=model.dtype)

    def linears():
        for layer in dec.layers:
            a, m = layer.self_attn, layer.mlp
            F.linear(x, a.qkv_proj.weight, a.qkv_proj.bias)
            F.linear(attn_out, a.o_proj.weight)
            F.linear(x, m.gate_up_proj.weight)
            F.linear(act, m.down_proj.weight)
        F.linear(x, dec.lm_head.weight)

    linears()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        linears()
    ms = median_ms(graph.replay, repeats)
    del graph
    return ms


def step_kernels(model: Model, context: int, t: int, replays: int = 10) -> list[dict]:
    """The kernel events (chrome-trace dicts: name, ts, dur in us) of `replays` graph replays of
    a t-token step after `context` cached tokens."""
    seq = model.new_sequence()
    seq.append(context)
    step_fn(model, seq, t, context)()
    events = kernel_events(model.graphs.last.replay, replays)
    seq.release()
    return events


def kernel_events(run, times: int) -> list[dict]:
    """The CUDA kernel events of `times` calls of run() (chrome-trace dicts: name, ts, dur in us)."""
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(times):
            run()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        return [e for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "kernel"]


def step_parts(model: Model, context: int, t: int, replays: int = 10) -> dict:
    """Profile graph replays of a step: device time of each kind of kernel, and the gaps."""
    events = step_kernels(model, context, t, replays)
    parts = {kind: 0.0 for kind in (*KINDS, "rest")}
    rest: dict[str, float] = {}  # the other kernels' time, by name
    for e in events:
        kind = next((k for k, frags in KINDS.items() if any(f in e["name"].lower() for f in frags)), "rest")
        parts[kind] += e["dur"] / 1e3 / replays
        if kind == "rest":
            rest[e["name"][:48]] = rest.get(e["name"][:48], 0.0) + e["dur"] / 1e3 / replays
    span = (max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)) / 1e3 / replays
    parts["gaps"] = span - sum(parts.values())
    parts["span"] = span
    parts["kernels"] = len(events) / replays
    parts["rest_ms"] = dict(sorted(rest.items(), key=lambda kv: -kv[1])[:12])
    return parts


def hf_state(model: Model) -> dict[str, torch.Tensor]:
    """Our weights under transformers' names (fused q/k/v and gate/up split again)."""
    cfg, out = model.config, {}
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    for name, p in model.decoder.state_dict().items():
        if "qkv_proj" in name:
            for part, w in zip("qkv", p.split([q, kv, kv])):
                out["model." + name.replace("qkv_proj", f"{part}_proj")] = w
        elif "gate_up_proj" in name:
            gate, up = p.chunk(2)
            out["model." + name.replace("gate_up_proj", "gate_proj")] = gate
            out["model." + name.replace("gate_up_proj", "up_proj")] = up
        elif name.startswith("lm_head"):
            out[name] = p
        else:
            out["model." + name] = p
    return out


def transformers_model(model: Model):
    from transformers import AutoConfig, AutoModelForCausalLM  # slow to import: only when timed

    fields = hf_config(model.config, str(model.dtype).removeprefix("torch."))
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    with torch.device(model.device):
        try:
            hf = AutoModelForCausalLM.from_config(config, dtype=model.dtype)
        except TypeError:  # transformers 4.x spelling
            hf = AutoModelForCausalLM.from_config(config, torch_dtype=model.dtype)
    missing, unexpected = hf.load_state_dict(hf_state(model), strict=False)
    if [m for m in missing if "rotary" not in m] or unexpected:
        raise EngineError(f"transformers model does not take these weights: {missing[:3]} {unexpected[:3]}")
    return hf.eval()


@torch.inference_mode()
def time_transformers(model: Model, contexts, lengths, repeats: int) -> dict:
    """transformers' eager forward of t tokens after `context` cached ones (its DynamicCache)."""
    from transformers import DynamicCache  # slow to import: only when timed

    hf = transformers_model(model)
    rows = {}
    for context in contexts:
        cache = DynamicCache(config=hf.config)
        prompt = torch.randint(0, model.config.vocab_size, (1, context), device="cuda")
        hf(input_ids=prompt, past_key_values=cache, use_cache=True)
        for t in lengths:
            ids = torch.randint(0, model.config.vocab_size, (1, t), device="cuda")

            def forward(hf=hf, ids=ids, cache=cache, context=context):
                hf(input_ids=ids, past_key_values=cache, use_cache=True).logits.argmax(-1).tolist()
                cache.crop(context)

            rows[f"{context}/{t}"] = host_ms(forward, repeats, warmup=2)
        del cache
    del hf
    torch.cuda.empty_cache()
    return rows
