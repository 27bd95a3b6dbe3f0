"""DFlash on CUDA: the drafter's graphed pass equals its op-by-op pass, and the output never changes.

float32 throughout: the graphed pass (context extension + block + lm_head + argmax, one replay)
against the same drafter op by op and against the CPU reference; greedy and sampled output with
a random drafter (and with one that foresees the reply, so long runs of drafts are accepted and
every extension length gets its graph) equal to plain decoding; the verify step takes the drafts
from the device.
"""

import copy

import pytest
import torch
import torch.nn.functional as F

from engine import AUTO, DFlashProposer, SamplingParams, generate, load_drafter, write_random_drafter
from engine.runtime.model import Model
from tests.dflash_target import BLOCK, PROMPT, VOCAB, make_target

pytestmark = pytest.mark.gpu

DEVICE = "cuda"


def to_device(model: Model, eager: bool) -> Model:
    decoder = copy.deepcopy(model.decoder).to(DEVICE)
    return Model(decoder, model.config, name=model.name, max_context=model.max_context, eager=eager)


def states_of(target: Model, drafter, ids: list[int]) -> torch.Tensor:
    """The target's states at the drafter's state layers for ids (a throwaway sequence)."""
    seq = target.new_sequence()
    target.state_layers = drafter.state_layers
    try:
        return target.forward(seq, torch.tensor(ids, device=target.device))[1]
    finally:
        target.state_layers = ()
        seq.release()


@pytest.fixture(scope="module")
def cpu():
    return make_target()


@pytest.fixture(scope="module")
def graphed(cpu):
    return to_device(cpu, eager=False)


@pytest.fixture(scope="module")
def checkpoint(cpu, tmp_path_factory):
    return write_random_drafter(tmp_path_factory.mktemp("random"), cpu, num_layers=2, std=0.3)


@pytest.fixture(scope="module")
def drafter(graphed, checkpoint):
    return load_drafter(str(checkpoint), graphed)


def test_graphed_pass_equals_the_eager_pass_and_the_reference(cpu, graphed, drafter, checkpoint):
    assert drafter.graphs is not None
    reference = load_drafter(str(checkpoint), cpu)
    ids = PROMPT * 3  # 36 tokens: a prompt too long for a graph, then steps of every size
    states = states_of(graphed, drafter, ids)
    cpu_states = states_of(cpu, reference, ids)
    # over 16 new states: context-only replays first (17 = 16 + 1, 35 = 32 + 3, 32 = 16 + 16),
    # then the pass
    for before, new in [(0, 20), (20, 1), (21, 5), (0, 16), (16, 16), (3, 0), (1, 35), (2, 17), (4, 32)]:
        anchor = ids[before + new] if before + new < len(ids) else 7
        drafter.clear()
        drafter.extend(states[:before])
        logits, drafts = drafter.graphs.run([states[before : before + new]], anchor)
        graph_logits, graph_drafts = logits.clone(), drafts.clone()
        assert drafter.context_length == before + new
        drafter.clear()
        drafter.extend(states[: before + new])
        eager = drafter.block(anchor)
        torch.testing.assert_close(graph_logits, eager, rtol=1e-5, atol=1e-5)
        assert torch.equal(graph_drafts, eager.argmax(dim=-1))
        reference.clear()
        reference.extend(cpu_states[: before + new])
        torch.testing.assert_close(graph_logits.cpu(), reference.block(anchor), rtol=1e-4, atol=1e-4)
    assert drafter.graphs.scratch_page not in drafter.seq.pages


def test_the_fused_context_extension_writes_what_the_torch_path_writes(graphed, checkpoint):
    """Context K/V through the fused norm and q/k kernel (a handful of launches) against op by op."""
    drafter = load_drafter(str(checkpoint), graphed)
    states = states_of(graphed, drafter, PROMPT)
    positions = torch.arange(3, 3 + len(PROMPT), device=DEVICE)
    pages = torch.arange(drafter.pool.k[0].shape[0] // drafter.pool.page_size, device=DEVICE)
    written = []
    for backend in ("torch", "triton"):
        with torch.inference_mode():
            for cache in (*drafter.pool.k, *drafter.pool.v):
                cache.fill_(0)  # nothing left of the other path's writes
            drafter.backend = backend
            drafter._extend(states, positions, pages)
            written.append([c.clone() for c in (*drafter.pool.k, *drafter.pool.v)])
    for torch_path, fused in zip(*written, strict=True):
        torch.testing.assert_close(fused, torch_path, rtol=1e-5, atol=1e-5)


def test_context_only_replays_write_what_the_op_by_op_extension_writes(graphed, checkpoint):
    """take_in (a catch-up, or a long hold let go) through the context-only graphs leaves the
    drafter's cache as extend leaves it, in one call or in pieces of odd lengths."""
    drafter = load_drafter(str(checkpoint), graphed)
    states = states_of(graphed, drafter, PROMPT * 3)
    caches = []
    for pieces in ([36], [5, 19, 12], None):
        drafter.clear()
        with torch.inference_mode():
            for cache in (*drafter.pool.k, *drafter.pool.v):
                cache.fill_(0)
        if pieces is None:
            drafter.extend(states)
        else:
            row = 0
            for n in pieces:
                drafter.take_in(states[row : row + n])
                row += n
        assert drafter.context_length == 36
        if pieces == [5, 19, 12]:  # through the context-only graphs, not op by op
            assert {("context", 4), ("context", 1), ("context", 16), ("context", 2), ("context", 8)} <= set(
                drafter.graphs.graphs)
        slots = drafter.seq.slots(0, 36).to(DEVICE)
        caches.append([c[slots].clone() for c in (*drafter.pool.k, *drafter.pool.v)])
    for graphed_cache in caches[:2]:
        for got, want in zip(graphed_cache, caches[2], strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("first,count", [(0, 40), (7, 3), (16, 20), (21, 200)])
def test_states_computed_again_through_the_fused_layers_are_the_steps_states(graphed, drafter, first, count):
    """context_states on the triton backend (a page table of the sequence's pages, then scratch
    ones) gives the states one-token steps kept, and leaves the sequence's K/V as they were;
    200 tokens run in chunks of what the small pool has free, each starting inside a page."""
    from engine.speculation.context_states import context_states

    ids = (PROMPT * 40)[: first + count + 1]
    seq = graphed.new_sequence()
    graphed.state_layers = drafter.state_layers
    try:
        kept = [graphed.forward(seq, torch.tensor(ids[:1], device=DEVICE))[1]]
        kept += [graphed.forward(seq, torch.tensor([t], device=DEVICE))[1] for t in ids[1:]]
        kept = torch.cat(kept)
        slots = seq.slots(0, len(ids)).to(DEVICE)
        k_before, v_before = graphed.pool.k[:, slots].clone(), graphed.pool.v[:, slots].clone()
        again = context_states(graphed, seq, ids[first : first + count], first)
        torch.testing.assert_close(again, kept[first : first + count], atol=1e-4, rtol=1e-4)
        assert torch.equal(graphed.pool.k[:, slots], k_before) and torch.equal(graphed.pool.v[:, slots], v_before)
    finally:
        graphed.state_layers = ()
        seq.release()


def test_short_recomputes_replay_the_step_graphs_and_long_ones_do_not(graphed, drafter, monkeypatch):
    """Up to context_states.GRAPHED tokens (a whole chunk), 16 a replay of the target's step graph
    (some 1.5 ms each on the H200's Coder-1.5B, where a pass op by op costs 25 ms of launches);
    past them op by op."""
    from engine.speculation import context_states as recompute

    replays, real = [], graphed.graphs.states
    monkeypatch.setattr(graphed.graphs, "states", lambda pages, start, ids, layers: replays.append(len(ids))
                        or real(pages, start, ids, layers))
    ids = (PROMPT * 40)[:60]
    seq = graphed.new_sequence()
    try:
        graphed.forward(seq, torch.tensor(ids, device=DEVICE))
        recompute.context_states(graphed, seq, ids[10:50], 10, drafter.state_layers)
        assert replays == [16, 16, 8]
        monkeypatch.setattr(recompute, "GRAPHED", 16)
        replays.clear()
        recompute.context_states(graphed, seq, ids[10:50], 10, drafter.state_layers)
        assert replays == []
    finally:
        seq.release()


def test_anchor_may_come_from_the_device(graphed, drafter):
    states = states_of(graphed, drafter, PROMPT)
    drafter.clear()
    from_host = drafter.graphs.run([states[:4], states[4:]], 9)[0].clone()
    drafter.clear()
    from_device = drafter.graphs.run([states], torch.tensor([9], device=DEVICE))[0]
    torch.testing.assert_close(from_device, from_host, rtol=0, atol=0)


@pytest.mark.parametrize("k", range(1, 16))
def test_float32_greedy_output_equals_plain(cpu, graphed, drafter, k):
    greedy = SamplingParams(max_tokens=32)
    plain = generate(cpu, PROMPT, greedy).tokens
    assert generate(graphed, PROMPT, greedy).tokens == plain
    assert generate(graphed, PROMPT, greedy, speculative=DFlashProposer(drafter, k)).tokens == plain
    assert graphed.state_layers == ()


def test_eager_cuda_drafter_keeps_the_output(cpu, checkpoint):
    eager = to_device(cpu, eager=True)
    drafter = load_drafter(str(checkpoint), eager)
    assert drafter.graphs is None
    greedy = SamplingParams(max_tokens=24)
    plain = generate(cpu, PROMPT, greedy).tokens
    for k in (1, 15):
        assert generate(eager, PROMPT, greedy, speculative=DFlashProposer(drafter, k)).tokens == plain


def test_sampled_output_equals_plain_sampled(graphed, drafter):
    sampling = SamplingParams(temperature=0.9, top_p=0.95, seed=7, max_tokens=32)
    plain = generate(graphed, PROMPT, sampling).tokens
    assert generate(graphed, PROMPT, sampling, speculative=DFlashProposer(drafter, 6)).tokens == plain


def test_sampled_drafts_from_the_graphed_pass_are_the_eager_pass_drafts(graphed, checkpoint):
    """Drafts sampled from the graph's logits (read before the verify step may reuse them) are the
    ones the same drafter samples op by op; the reply keeps the draws made at each position."""
    sampling = SamplingParams(temperature=1.0, seed=11, max_tokens=24)
    replies = []
    for eager in (False, True):
        target = graphed if not eager else to_device(graphed, eager=True)
        drafter = load_drafter(str(checkpoint), target)
        assert (drafter.graphs is None) == eager
        result = generate(target, PROMPT, sampling, speculative=DFlashProposer(drafter, 6, sample=True))
        assert result.metrics.drafted > 0 and len(result.tokens) == 24
        replies.append(result.tokens)
    assert replies[0] == replies[1]


def test_a_drafter_vocabulary_in_graphs_drafts_its_tokens_and_keeps_the_output(graphed, checkpoint):
    """The pass's graph drafts over the drafter's own tokens (their lm_head rows, mapped back to
    token ids inside the graph): every draft among them, the reply plain decoding's."""
    from engine import Generation

    drafter = load_drafter(str(checkpoint), graphed)
    kept = list(range(0, VOCAB, 2))
    drafter.use_vocab(kept)
    greedy = SamplingParams(max_tokens=32)
    steps = list(Generation(graphed, PROMPT, greedy, (), speculative=DFlashProposer(drafter, 6)))
    drafts = {t for step in steps for t in step.drafts}
    assert drafter.graphs.graphs and drafts and drafts <= set(kept)
    assert [t for step in steps for t in step.tokens] == generate(graphed, PROMPT, greedy).tokens


def test_foreseeing_drafter_in_graphs_keeps_the_output(cpu, graphed, checkpoint, monkeypatch):
    """The graphed pass still runs, but its logits are swapped (inside the graph) for the plain
    reply's next tokens, wrong wherever the position is a multiple of 7: whole blocks are
    accepted or refused part-way, so extensions of many lengths replay their graphs."""
    greedy = SamplingParams(max_tokens=64)
    plain = generate(cpu, PROMPT, greedy).tokens
    full = torch.tensor(PROMPT + plain + [0] * 2 * BLOCK, device=DEVICE)
    positions = torch.arange(full.shape[0], device=DEVICE)
    foreseen = (full + (positions % 7 == 0).long()) % VOCAB
    drafter = load_drafter(str(checkpoint), graphed)
    block = drafter._fused_block

    def foreseeing(ids, start, page_table):
        block(ids, start, page_table)
        drafts = foreseen[start + torch.arange(1, BLOCK, device=DEVICE)]
        return F.one_hot(drafts, VOCAB).float()

    drafter._fused_block = foreseeing
    monkeypatch.setenv("SPECCHAT_DRAFT_AHEAD", "1")
    for k in (3, 15):
        for ahead in (True, False):  # the pass drafted ahead (one graph), or after each step (one per count)
            proposer = DFlashProposer(drafter, k)
            proposer.can_draft_ahead = lambda ahead=ahead: ahead
            result = generate(graphed, PROMPT, greedy, speculative=proposer)
            assert result.tokens == plain, (k, ahead)
            assert max(result.metrics.histogram) >= 3
    assert "ahead" in drafter.graphs.graphs
    assert len([key for key in drafter.graphs.graphs if isinstance(key, int)]) >= 4, sorted(map(str, drafter.graphs.graphs))


def test_the_graphed_pass_drafted_ahead_is_the_pass_made_after(graphed, checkpoint):
    """The pass queued behind a verify step takes in all of the step's states and starts its block
    after the count kept, read from the device: its drafts are those of the pass given the kept
    states alone, for every count, and the cache is left holding the context."""
    drafter = load_drafter(str(checkpoint), graphed)
    ids = PROMPT + [7, 2, 11, 4, 9, 1, 13]
    states = states_of(graphed, drafter, ids)
    context, step = states[: len(PROMPT)], states[len(PROMPT):]
    # logits compared, not drafts: the graph projects 16 rows where the other projects n, and
    # cuBLAS may round the two apart in the last bits (a near-tie would flip an argmax)
    for accepted in range(step.shape[0]):
        anchor = torch.tensor([ids[len(PROMPT) + accepted]], device=DEVICE)
        drafter.clear()
        drafter.take_in(context)
        want = drafter.draft([step[: accepted + 1]], anchor, logits=True).clone()
        drafter.clear()
        drafter.take_in(context)
        drafter.draft_ahead(step, torch.tensor([accepted], device=DEVICE), anchor)
        got = drafter.graphs.graphs["ahead"][1][0].clone()
        drafter.settle(len(PROMPT) + accepted + 1)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        # and how sure the drafter is of its first draft, read from those logits before they are reused
        sure = torch.softmax(want[:1].float(), dim=-1).amax(dim=-1)
        torch.testing.assert_close(drafter.ahead_sure, sure, rtol=1e-3, atol=1e-3)
        after = drafter.draft([], anchor, logits=True)  # the same block again, from the settled context
        torch.testing.assert_close(after, want, rtol=1e-4, atol=1e-4)


def test_verify_step_takes_the_drafts_from_the_device(graphed, drafter, monkeypatch):
    verified = []
    step = graphed.step

    def recording(seq, ids, *args, **kw):
        # a copy queued before the step: later drafter passes reuse the drafts' device buffer
        verified.append(ids.clone() if isinstance(ids, torch.Tensor) else ids)
        return step(seq, ids, *args, **kw)

    monkeypatch.setattr(graphed, "step", recording)
    result = generate(graphed, PROMPT, SamplingParams(max_tokens=12), speculative=DFlashProposer(drafter, 5))
    drafting = [s for s in result.steps if s.drafts]
    assert len(drafting) > 0
    for s, ids in zip(drafting, verified[1:]):  # verified[0] is the prompt
        assert isinstance(ids, torch.Tensor) and ids.device.type == "cuda"
        assert ids[1:].tolist() == s.drafts


@pytest.mark.parametrize("sampling", [
    SamplingParams(max_tokens=32),
    SamplingParams(temperature=0.9, top_p=0.95, seed=7, max_tokens=32),
], ids=["greedy", "sampled"])
def test_drafting_ahead_in_graphs_keeps_the_output(graphed, drafter, sampling, monkeypatch):
    plain = generate(graphed, PROMPT, sampling).tokens
    monkeypatch.setenv("SPECCHAT_DRAFT_AHEAD", "1")
    for k in (1, 6, 15, AUTO):
        assert generate(graphed, PROMPT, sampling, speculative=DFlashProposer(drafter, k)).tokens == plain, k


def test_after_warm_up_a_dflash_reply_captures_no_graph(graphed, drafter, monkeypatch):
    """Warming DFlash up captures the drafter's passes (the one drafted ahead too) and the
    target's steps that keep its states."""
    monkeypatch.setenv("SPECCHAT_DRAFT_AHEAD", "1")
    sampling = SamplingParams(max_tokens=40)
    proposer = DFlashProposer(drafter, k=BLOCK - 1)
    graphed.warm_up(sampling)
    proposer.warm_up(graphed, sampling)
    before = len(graphed.graphs.graphs), len(drafter.graphs.graphs)
    generate(graphed, PROMPT, sampling, speculative=proposer)
    assert (len(graphed.graphs.graphs), len(drafter.graphs.graphs)) == before


def test_training_on_cuda_starts_from_the_cpu_runs_weights_and_learns(cpu, graphed, tmp_path):
    """The trainer on the GPU: the same seed gives the drafter the CPU run starts from, the
    batched target pass gives the serving states, and a few steps lower the loss."""
    from engine.speculation.proposers.dflash.training.forward import batch_states, target_states
    from engine.speculation.proposers.dflash.training.trainer import Sample, Trainer, TrainSettings

    g = torch.Generator().manual_seed(0)
    samples = [Sample(torch.randint(0, VOCAB - 1, (40,), generator=g).tolist(), 12) for _ in range(8)]
    settings = TrainSettings(num_layers=2, block_size=BLOCK, anchors=8, batch_size=4, steps=12, max_length=64,
                             learning_rate=1e-2, warmup_steps=2, init_std=0.1)
    on_cpu = Trainer(cpu, samples, settings, tmp_path / "cpu")
    on_gpu = Trainer(graphed, samples, settings, tmp_path / "gpu")
    for (name, a), (_, b) in zip(on_cpu.drafter.state_dict().items(), on_gpu.drafter.state_dict().items()):
        assert torch.equal(a, b.cpu()), name
    graphed.state_layers = on_gpu.drafter.state_layers
    try:
        ids = torch.tensor([samples[0].ids, samples[1].ids], device=DEVICE)
        torch.testing.assert_close(batch_states(graphed, ids)[0], target_states(graphed, samples[0].ids),
                                   atol=1e-4, rtol=1e-3)
    finally:
        graphed.state_layers = ()
    losses = []
    on_gpu.run(lambda report: losses.append(report.loss))
    assert len(losses) == 12 and sum(losses[-3:]) < sum(losses[:3])


@pytest.mark.parametrize("sampling", [SamplingParams(max_tokens=70),
                                      SamplingParams(temperature=0.8, top_p=0.9, seed=3, max_tokens=70)])
def test_runs_queued_ahead_keep_the_states_the_drafter_reads(graphed, drafter, sampling):
    """The policy's plain steps run as chain-graph runs, the next queued before one is read: each
    run's states are copied out of the chain's buffers first, so the drafter drafts what it
    drafts with runs read one by one."""
    from engine import AUTO, Generation
    from tests.sits_out import SitsOut

    replies = []
    for run_ahead in (False, True):
        gen = Generation(graphed, PROMPT, sampling, speculative=DFlashProposer(drafter, k=AUTO),
                         policy=SitsOut(graphed))
        gen.run_ahead = run_ahead
        steps = list(gen)
        replies.append((gen.tokens, [s.drafts for s in steps]))
    assert replies[1] == replies[0]
    assert sum(1 for drafts in replies[0][1] if drafts) > 2
