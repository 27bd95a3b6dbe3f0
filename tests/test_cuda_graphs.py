"""CUDA graph steps against eager steps and the CPU reference (CUDA only).

float32 greedy: the graph path, the eager CUDA path and the CPU reference path produce the same
tokens, plain and speculative, for every k. bfloat16: graph and eager run the same kernels, but
the matmul library may pick other kernels inside a capture, so the tests allow them to part only
where the two best logits are nearly tied; nothing else is allowed to differ.
"""

import copy
import json

import pytest
import torch

from engine import DraftProposer, NgramProposer, SamplingParams, generate
from engine.runtime.model import Model
from tests.conftest import tiny_model

pytestmark = pytest.mark.gpu

PROMPT = [5, 9, 2, 7, 5, 9, 2, 7, 1, 3, 5, 9, 2, 7, 5, 9]


def on_cuda(model: Model, eager: bool, dtype=torch.float32, batch_invariant=False) -> Model:
    decoder = copy.deepcopy(model.decoder).to("cuda", dtype)
    return Model(decoder, model.config, name=model.name, max_context=model.max_context, eager=eager,
                 batch_invariant=batch_invariant)


@pytest.fixture(scope="module")
def trio():
    cpu = tiny_model("qwen3", seed=3)
    return cpu, on_cuda(cpu, eager=False), on_cuda(cpu, eager=True)


def test_graph_step_equals_eager_step(trio):
    _, graphed, eager = trio
    assert graphed.graphs is not None and eager.graphs is None
    greedy = SamplingParams()
    a, b = graphed.new_sequence(), eager.new_sequence()
    graphed.step(a, PROMPT, greedy)
    eager.step(b, PROMPT, greedy)
    for t in (1, 2, 7, 16):
        ids = list(range(3, 3 + t))
        x, y = graphed.step(a, ids, greedy), eager.step(b, ids, greedy)
        torch.testing.assert_close(x.logits, y.logits, rtol=1e-5, atol=1e-5)
        assert torch.equal(x.tokens, y.tokens)


@pytest.mark.parametrize("down_norm", [False, True])
@pytest.mark.parametrize("layers", [(0, 1), (1,), (0, 2, 3)])
def test_the_fused_layers_keep_the_torch_paths_states(trio, layers, down_norm, monkeypatch):
    """The states a drafter reads, kept by the residual adds of the fused layers (the final norm's
    for the last layer; down_proj's where it ends in the next norm), are the torch path's residual
    stream after each tapped layer."""
    from engine.kernels import overlap

    monkeypatch.setattr(overlap, "norm_after_down", lambda: down_norm)
    cpu, graphed, _ = trio
    if down_norm:  # graphs captured without it would replay the other path
        graphed = on_cuda(cpu, eager=False)
    layers = tuple(i for i in layers if i < cpu.config.num_layers)
    greedy = SamplingParams()
    a, b = cpu.new_sequence(), graphed.new_sequence()
    cpu.state_layers = graphed.state_layers = layers
    try:
        for ids in (PROMPT, [3], [4, 5, 6, 7, 8]):
            x, y = cpu.step(a, ids, greedy), graphed.step(b, ids, greedy)
            torch.testing.assert_close(y.states.cpu(), x.states, rtol=1e-4, atol=1e-4)
    finally:
        cpu.state_layers = graphed.state_layers = ()
        a.release()
        b.release()


def test_a_chained_run_with_state_taps_keeps_each_tokens_states(trio):
    """A run of plain steps with a DFlash drafter attached: each replay keeps its token's states."""
    _, graphed, eager = trio
    greedy = SamplingParams()
    a, b = graphed.new_sequence(), eager.new_sequence()
    graphed.state_layers = eager.state_layers = (0, 1)
    try:
        graphed.step(a, PROMPT, greedy)
        eager.step(b, PROMPT, greedy)
        run = graphed.chain(a, torch.tensor([3], device="cuda"), 6, greedy)
        tokens, states = run.tokens.tolist(), run.states.clone()
        token = 3
        for i in range(6):
            out = eager.step(b, [token], greedy)
            torch.testing.assert_close(states[i : i + 1], out.states, rtol=1e-5, atol=1e-5)
            token = int(out.tokens[0])
            assert token == tokens[i]
    finally:
        graphed.state_layers = eager.state_layers = ()
        a.release()
        b.release()


@pytest.mark.parametrize("k", range(1, 16))
def test_float32_greedy_is_the_same_on_every_path(trio, k):
    cpu, graphed, eager = trio
    greedy = SamplingParams(max_tokens=40)
    plain = generate(cpu, PROMPT, greedy).tokens
    for model in (graphed, eager):
        assert generate(model, PROMPT, greedy).tokens == plain
        assert generate(model, PROMPT, greedy, speculative=NgramProposer(k=k)).tokens == plain
    draft_cpu = tiny_model("qwen3", seed=4)
    for eager_draft in (False, True):
        draft = on_cuda(draft_cpu, eager=eager_draft)
        assert generate(graphed, PROMPT, greedy, speculative=DraftProposer(draft, k=k)).tokens == plain


def test_sampled_steps_draw_the_same_tokens_as_eager(trio):
    cpu, graphed, eager = trio
    for sampling in (SamplingParams(temperature=0.8, seed=11, max_tokens=30),
                     SamplingParams(temperature=1.2, top_k=20, top_p=0.9, seed=5, max_tokens=30)):
        reference = generate(cpu, PROMPT, sampling).tokens
        assert generate(graphed, PROMPT, sampling).tokens == reference
        assert generate(eager, PROMPT, sampling).tokens == reference


@pytest.mark.parametrize("sampling", [SamplingParams(max_tokens=45),
                                      SamplingParams(temperature=0.8, seed=11, max_tokens=45)])
def test_runs_queued_ahead_on_the_device_give_the_runs_read_one_by_one(trio, sampling):
    """The next chain graph's replays queued before the host reads a run (runs.py) overwrite the
    chain's output buffers: the tokens read must still be each run's own, and a stop inside a
    run leaves nothing of the unread one behind."""
    from engine import stream

    _, graphed, eager = trio
    for model in (graphed, eager):
        free = model.pool.num_free  # a graphed model keeps a page of its own
        replies = []
        for run_ahead in (False, True):
            gen = stream(model, PROMPT, sampling)
            gen.run_ahead = run_ahead
            list(gen)
            replies.append(gen.tokens)
        assert replies[1] == replies[0]
        stop = replies[0][12]
        gen = stream(model, PROMPT, sampling, stop_ids=[stop])
        assert [t for step in gen for t in step.tokens] == replies[0][: replies[0].index(stop) + 1]
        assert model.pool.num_free == free


@pytest.mark.parametrize("sample", [False, True])
def test_drafts_from_the_chain_graph_equal_stepped_drafts(trio, sample):
    _, graphed, _ = trio
    sampling = SamplingParams(temperature=0.8, seed=11, max_tokens=30)
    # Fresh drafters: the prompt runs eagerly (17 tokens), so the chain graph is captured before
    # the one- and two-token step graphs, whose outputs its replays may then overwrite. The
    # min(1, p/q) test compares probabilities, which a CPU and a GPU round differently, so the
    # chained graphs are held to the eager steps of the same device.
    drafts = [on_cuda(tiny_model("qwen3", seed=4), eager=e) for e in (False, True)]
    chained, stepped = (generate(graphed, PROMPT, sampling, speculative=DraftProposer(d, k=4, sample=sample))
                        for d in drafts)
    assert [s.drafts for s in chained.steps] == [s.drafts for s in stepped.steps]
    assert chained.tokens == stepped.tokens


def test_bfloat16_graph_and_eager_part_only_at_near_ties():
    cpu = tiny_model("qwen3", seed=6)
    graphed, eager = on_cuda(cpu, False, torch.bfloat16), on_cuda(cpu, True, torch.bfloat16)
    greedy = SamplingParams()
    a, b = graphed.new_sequence(), eager.new_sequence()
    x, y = graphed.step(a, PROMPT, greedy), eager.step(b, PROMPT, greedy)
    token = int(y.tokens[-1])
    for _ in range(60):
        x, y = graphed.step(a, [token], greedy), eager.step(b, [token], greedy)
        if not torch.equal(x.tokens, y.tokens):
            top2 = y.logits[-1].topk(2).values
            assert (top2[0] - top2[1]).abs() < 0.05 * top2[0].abs(), "graph and eager differ away from a tie"
            break
        token = int(y.tokens[-1])


def test_bfloat16_verify_steps_with_split_partials_part_from_whole_products_only_at_near_ties(monkeypatch):
    """o and down left as float32 split partials, which the residual add sums (what a verify step
    of the real models' narrow matrices does): the logits of whole products up to bf16 rounding.
    Layer 0's stream is kept for a drafter, so its MLP output stays whole; layer 1's is not."""
    from engine.kernels import gemv as triton_gemv

    cpu = tiny_model("qwen3", seed=6, hidden_size=64, intermediate_size=128, head_dim=16)
    greedy = SamplingParams()
    o, down = (16, 16, 4, 2, 2, False, True), (16, 32, 4, 2, 4, False, True)  # 2 and 4 splits

    def verify(model):
        model.state_layers = (0,)
        seq = model.new_sequence()
        model.step(seq, PROMPT, greedy)
        return model.step(seq, PROMPT[::-1], greedy)

    whole = verify(on_cuda(cpu, False, torch.bfloat16))
    launched = []
    launch = triton_gemv.launch

    def counted_launch(*args, config=None, **kw):
        launched.append(config)
        return launch(*args, config=config, **kw)

    monkeypatch.setattr(triton_gemv, "launch", counted_launch)
    monkeypatch.setitem(triton_gemv.PARTS_CONFIG, (64, 64), o)
    monkeypatch.setitem(triton_gemv.PARTS_CONFIG, (64, 128), down)
    parted = verify(on_cuda(cpu, False, torch.bfloat16))
    assert {c for c in launched if c and c[-1] is True} == {o, down}  # both took the partials path
    for got, expect in ((parted.logits, whole.logits), (parted.states, whole.states)):
        assert ((got.float() - expect.float()).norm() / expect.float().norm()).item() < 2e-2
    for row, (a, b) in enumerate(zip(parted.tokens.tolist(), whole.tokens.tolist())):
        if a != b:
            top2 = whole.logits[row].topk(2).values
            assert (top2[0] - top2[1]).abs() < 0.05 * top2[0].abs(), "partials changed a clear winner"


def memcpys(prof, path) -> list[tuple[str, int]]:
    """(direction, bytes) of every memory copy the profiler saw on the device."""
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    return [(e["name"], e.get("args", {}).get("bytes", -1)) for e in events
            if e.get("cat") == "gpu_memcpy"]


def test_a_verify_step_reads_back_only_the_sampled_ids(trio, tmp_path):
    _, graphed, _ = trio
    greedy = SamplingParams()
    seq = graphed.new_sequence()
    graphed.step(seq, PROMPT, greedy)
    for k in (0, 3, 15):
        ids = list(range(1, k + 2))
        graphed.step(seq, ids, greedy)  # captured before profiling
        seq.truncate(seq.length - len(ids))
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            tokens = graphed.step(seq, ids, greedy).tokens.tolist()
            torch.cuda.synchronize()
        assert len(tokens) == k + 1
        copies = memcpys(prof, tmp_path / f"verify{k}.json")
        back = [c for c in copies if "DtoH" in c[0]]
        assert back == [(back[0][0], 8 * (k + 1))], copies
        assert len([c for c in copies if "HtoD" in c[0]]) == 1, copies  # the packed inputs


def test_a_draft_chain_syncs_once_per_proposal(tmp_path):
    target = on_cuda(tiny_model("qwen3", seed=3), eager=False)
    draft = on_cuda(tiny_model("qwen3", seed=4), eager=False)
    proposer = DraftProposer(draft, k=6)
    proposer.attach(target, SamplingParams())
    context = PROMPT + [1]
    proposer.propose(context, 6)  # prefill and capture
    # read before profiling: the tail copies out the first proposal's drafts, which the
    # generation loop has read by then
    context += proposal_tail(proposer, context)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        proposal = proposer.propose(context, 6)
        drafts = proposal.drafts  # the generation loop reads them once the verify step is queued
        torch.cuda.synchronize()
    back = [c for c in memcpys(prof, tmp_path / "chain.json") if "DtoH" in c[0]]
    assert len(drafts) == 6
    assert len(back) == 1 and back[0][1] == 8 * 6, back


def test_a_drafting_step_reads_its_drafts_and_tokens_back_in_one_copy(tmp_path):
    from engine import Generation

    target = on_cuda(tiny_model("qwen3", seed=3), eager=False)
    draft = on_cuda(tiny_model("qwen3", seed=4), eager=False)
    steps = iter(Generation(target, PROMPT, SamplingParams(max_tokens=40), speculative=DraftProposer(draft, k=4)))
    next(steps), next(steps), next(steps)  # the prefill, then steps that capture their graphs
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step = next(steps)
        torch.cuda.synchronize()
    back = [c[1] for c in memcpys(prof, tmp_path / "step.json") if "DtoH" in c[0]]
    assert len(step.drafts) == 4 and back == [8 * (2 * 4 + 1)], back  # drafts and verified tokens


def proposal_tail(proposer, context) -> list[int]:
    """Two tokens as if the target had accepted the first two drafts."""
    return proposer.seen[len(context) : len(context) + 2]


@pytest.mark.parametrize("eager", [False, True])
def test_batch_invariant_steps_give_a_token_the_same_logits_decoded_or_verified(eager):
    model = on_cuda(tiny_model("qwen3", seed=6), eager, torch.bfloat16, batch_invariant=True)
    greedy = SamplingParams()
    seq = model.new_sequence()
    tokens = [int(model.step(seq, PROMPT, greedy, last_only=True).tokens[-1])]
    decoded = []
    for _ in range(15):
        out = model.step(seq, tokens[-1:], greedy)
        decoded.append(out.logits[0].clone())
        tokens.append(int(out.tokens[0]))
    seq.truncate(len(PROMPT))
    verified = model.step(seq, tokens[:15], greedy).logits  # the same tokens as one 15-token step
    for i in range(15):
        assert torch.equal(verified[i], decoded[i]), i  # bf16, bit for bit


def test_batch_invariant_bf16_speculation_gives_plain_decodings_tokens():
    cpu = tiny_model("qwen3", seed=6)
    model = on_cuda(cpu, False, torch.bfloat16, batch_invariant=True)
    draft = on_cuda(tiny_model("qwen3", seed=7), False, torch.bfloat16)
    for sampling in (SamplingParams(max_tokens=60), SamplingParams(temperature=0.8, seed=3, max_tokens=60)):
        plain = generate(model, PROMPT, sampling).tokens
        for k in (1, 4, 15):
            assert generate(model, PROMPT, sampling, speculative=NgramProposer(k=k)).tokens == plain, k
            assert generate(model, PROMPT, sampling, speculative=DraftProposer(draft, k=k)).tokens == plain, k


class Litter:
    """Something dropped in a reference cycle: only the garbage collector frees it."""


def drop_drafter_like_litter(pool, n: int = 8) -> None:
    """Objects like a drafter switched away from: a pinned input buffer a copy used, an event,
    a graph captured into the pool the next capture shares."""
    from engine.runtime.step_graphs import capture

    y = torch.zeros(64, device="cuda")
    for _ in range(n):
        item = Litter()
        item.cycle = item
        item.host = torch.arange(256).pin_memory()
        item.device = item.host.to("cuda", non_blocking=True)
        item.event = torch.cuda.Event()
        item.event.record()
        item.graph = capture(lambda: y + 1, pool)
    torch.cuda.synchronize()


def test_garbage_collected_during_a_capture_does_not_break_it():
    import gc

    from engine.runtime.step_graphs import capture

    pool = torch.cuda.graph_pool_handle()
    x = torch.ones(64, device="cuda")
    thresholds = gc.get_threshold()

    def body():
        if torch.cuda.is_current_stream_capturing():
            gc.set_threshold(1)  # the collector runs at the next allocation, unless held off
            for _ in range(100):
                Litter().cycle = None
        return x * 2

    gc.collect()
    gc.set_threshold(10**9)  # nothing collected until the capture is under way
    try:
        drop_drafter_like_litter(pool)
        graph, out = capture(body, pool)
    finally:
        gc.set_threshold(*thresholds)
    graph.replay()
    assert torch.equal(out, torch.full_like(x, 2))
    assert gc.isenabled()


@pytest.mark.parametrize("sampling", [SamplingParams(max_tokens=40),
                                      SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=4, max_tokens=40)])
def test_after_warm_up_a_reply_captures_no_graph(sampling):
    """The chat warms up at load: every graph a reply with these settings replays is captured
    then, so no reply pays for a capture (or a kernel compile) on first use."""
    model = on_cuda(tiny_model("qwen3", seed=5), eager=False)
    draft = on_cuda(tiny_model("qwen3", seed=6), eager=False)
    for proposer in (None, NgramProposer(k=4), DraftProposer(draft, k=5, sample=True)):
        model.warm_up(sampling)
        if proposer is not None:
            proposer.warm_up(model, sampling)
        before = len(model.graphs.graphs), len(draft.graphs.graphs)
        generate(model, PROMPT, sampling, speculative=proposer)
        assert (len(model.graphs.graphs), len(draft.graphs.graphs)) == before, proposer



def cuda_kernels(model: Model, calls) -> list[str]:
    """Names of the CUDA kernels `calls(model)` launches."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        calls(model)
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def test_long_steps_and_prompts_launch_no_cudnn_attention(monkeypatch):
    """cuDNN plans each new call shape on the host (2.3 ms a call on the H200): a prompt, a long
    step after cached tokens and the states computed again go to torch's other fused kernels.
    With cuDNN allowed again, the same prompt does launch it: the check can see it."""
    from torch.nn.attention import SDPBackend

    from engine.runtime import attention
    from engine.speculation.context_states import context_states

    greedy = SamplingParams(temperature=0.0)
    cpu = tiny_model("qwen2", hidden_size=256, num_heads=2, num_kv_heads=1, head_dim=128, intermediate_size=256)
    model = on_cuda(cpu, eager=False, dtype=torch.bfloat16)

    def prompt_then_more(model):
        seq = model.new_sequence()
        model.step(seq, list(range(3, 60)), greedy, last_only=True)
        model.step(seq, list(range(5, 45)), greedy)  # 40 tokens after the prompt
        context_states(model, seq, list(range(5, 45)), 57, (0, 1))
        seq.release()

    def prompt(model):
        seq = model.new_sequence()
        model.step(seq, list(range(3, 60)), greedy, last_only=True)
        seq.release()

    kernels = cuda_kernels(model, prompt_then_more)
    assert kernels and not [k for k in kernels if "cudnn" in k.lower()]
    monkeypatch.setattr(attention, "FUSED_BACKENDS", [*attention.FUSED_BACKENDS, SDPBackend.CUDNN_ATTENTION])
    assert any("cudnn" in k.lower() for k in cuda_kernels(model, prompt))
