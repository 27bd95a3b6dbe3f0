"""DFlash: the drafter computes z-lab's forward, loads z-lab's format, and never changes the output."""

import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from engine import (
    DFlashProposer,
    EngineError,
    Generation,
    SamplingParams,
    generate,
    load_drafter,
    write_random_drafter,
)
from engine.speculation.context_states import context_states
from engine.speculation.proposers.dflash.network import default_target_layer_ids, distinct_target_layer_ids
from tests.conftest import tiny_model
from tests.dflash_target import (
    BLOCK,
    DRAFT_LAYERS,
    HEAD_DIM,
    HEADS,
    HIDDEN,
    INTERMEDIATE,
    KV_HEADS,
    MASK,
    PROMPT,
    TARGET_LAYERS,
    VOCAB,
    make_target,
)


def zlab_config(target_layer_ids=(4, 1, 4), **kw) -> dict:
    """config.json as z-lab writes it (Qwen3 keys plus block_size, num_target_layers, dflash_config).
    The default layer ids go backwards and repeat a layer on purpose."""
    cfg = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "block_size": BLOCK,
        "num_target_layers": TARGET_LAYERS,
        "dflash_config": {"mask_token_id": MASK, "target_layer_ids": list(target_layer_ids)},
        "num_hidden_layers": DRAFT_LAYERS,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "rope_theta": 5000.0,
        "rms_norm_eps": 1e-6,
        "vocab_size": VOCAB,
        "tie_word_embeddings": False,
        "layer_types": ["full_attention"] * DRAFT_LAYERS,
    }
    cfg.update(kw)
    return cfg


def zlab_weights(n_states: int = 3, seed: int = 1) -> dict[str, torch.Tensor]:
    """Random tensors under exactly z-lab's names and shapes."""
    g = torch.Generator().manual_seed(seed)
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM

    def rand(*shape, mean=0.0, std=0.3):
        return mean + std * torch.randn(shape, generator=g)

    w = {
        "fc.weight": rand(HIDDEN, n_states * HIDDEN, std=0.1),
        "hidden_norm.weight": rand(HIDDEN, mean=1.0),
        "norm.weight": rand(HIDDEN, mean=1.0),
    }
    for i in range(DRAFT_LAYERS):
        p = f"layers.{i}."
        w[p + "input_layernorm.weight"] = rand(HIDDEN, mean=1.0)
        w[p + "post_attention_layernorm.weight"] = rand(HIDDEN, mean=1.0)
        w[p + "self_attn.q_proj.weight"] = rand(q, HIDDEN)
        w[p + "self_attn.k_proj.weight"] = rand(kv, HIDDEN)
        w[p + "self_attn.v_proj.weight"] = rand(kv, HIDDEN)
        w[p + "self_attn.o_proj.weight"] = rand(HIDDEN, q)
        w[p + "self_attn.q_norm.weight"] = rand(HEAD_DIM, mean=1.0)
        w[p + "self_attn.k_norm.weight"] = rand(HEAD_DIM, mean=1.0)
        w[p + "mlp.gate_proj.weight"] = rand(INTERMEDIATE, HIDDEN)
        w[p + "mlp.up_proj.weight"] = rand(INTERMEDIATE, HIDDEN)
        w[p + "mlp.down_proj.weight"] = rand(HIDDEN, INTERMEDIATE)
    return w


def write_checkpoint(directory, config: dict, weights: dict):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    save_file(weights, str(directory / "model.safetensors"))
    return directory


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Matrices this small run fastest on one thread (and no slower when the machine is busy)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def target():
    return make_target()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("zlab"), zlab_config(), zlab_weights())


@pytest.fixture(scope="module")
def drafter(target, checkpoint):
    return load_drafter(str(checkpoint), target)


# --- an independent, straightforward re-implementation of z-lab's DFlashDraftModel forward ---


def rms(x, weight, eps=1e-6):
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate(x, positions, theta):  # x [T, heads, D], rotate-half RoPE
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2).float() / d)
    ang = positions.float()[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1)[:, None], torch.cat([ang.sin(), ang.sin()], -1)[:, None]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def zlab_block_logits(w, cfg, target_hidden, noise_embedding, lm_head):
    """z-lab: context = hidden_norm(fc(target_hidden)); per layer q from the block, k/v from
    [context; block] (k_norm on both), RoPE at [context | block] positions, no mask; final norm;
    lm_head at block positions 1..B-1."""
    c, b = target_hidden.shape[0], noise_embedding.shape[0]
    positions = torch.arange(c + b)
    theta, group = cfg["rope_theta"], HEADS // KV_HEADS
    ctx = rms(target_hidden @ w["fc.weight"].T, w["hidden_norm.weight"])
    x = noise_embedding
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q = rms(
            (h @ w[p + "self_attn.q_proj.weight"].T).view(b, HEADS, HEAD_DIM),
            w[p + "self_attn.q_norm.weight"],
        )
        both = torch.cat([ctx, h])
        k = rms(
            (both @ w[p + "self_attn.k_proj.weight"].T).view(c + b, KV_HEADS, HEAD_DIM),
            w[p + "self_attn.k_norm.weight"],
        )
        v = (both @ w[p + "self_attn.v_proj.weight"].T).view(c + b, KV_HEADS, HEAD_DIM)
        q, k = rotate(q, positions[c:], theta), rotate(k, positions, theta)
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / HEAD_DIM**0.5
        attn = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(b, HEADS * HEAD_DIM)
        x = x + attn @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        x = (
            x
            + (F.silu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T))
            @ w[p + "mlp.down_proj.weight"].T
        )
    return lm_head(rms(x, w["norm.weight"])[1:])


def target_states(target, ids, layer_ids):
    """HF's hidden_states[j + 1] for each j, concatenated: the target's residual stream after layer j."""
    seq = target.new_sequence()
    target.state_layers = tuple(range(TARGET_LAYERS))
    try:
        _, every = target.forward(seq, torch.tensor(ids))
    finally:
        target.state_layers = ()
        seq.release()
    per_layer = every.view(len(ids), TARGET_LAYERS, HIDDEN)
    return torch.cat([per_layer[:, j] for j in layer_ids], dim=-1)


def drafter_states(target, drafter, ids):
    """What the target hands the drafter: its states at the drafter's state_layers."""
    seq = target.new_sequence()
    target.state_layers = drafter.state_layers
    try:
        return target.forward(seq, torch.tensor(ids))[1]
    finally:
        target.state_layers = ()
        seq.release()


# --- the forward ---


def test_block_logits_match_zlab_forward(target, drafter):
    ids = PROMPT + [7, 0, 11]
    anchor = 2
    w = zlab_weights()
    expected = zlab_block_logits(
        w,
        zlab_config(),
        target_states(target, ids, [4, 1, 4]),
        target.decoder.embed_tokens(torch.tensor([anchor] + [MASK] * (BLOCK - 1))),
        target.decoder.lm_head,
    )
    drafter.clear()
    drafter.extend(drafter_states(target, drafter, ids))
    got = drafter.block(anchor)
    assert got.shape == (BLOCK - 1, VOCAB)
    assert (got - expected).abs().max().item() < 1e-4
    assert drafter.context_length == len(ids), "the block's K/V must leave the drafter's cache"


def test_context_fed_step_by_step_equals_context_fed_at_once(target, drafter):
    ids = PROMPT + [7, 0, 11, 2, 2, 9]
    states = drafter_states(target, drafter, ids)
    drafter.clear()
    drafter.extend(states)
    at_once = drafter.block(4)
    drafter.clear()
    for start, end in [(0, 5), (5, 6), (6, 10), (10, len(ids))]:
        drafter.extend(states[start:end])
        drafter.block(ids[end - 1])  # a pass in between leaves nothing behind
    assert torch.allclose(drafter.block(4), at_once, atol=1e-5)


def test_a_catch_up_is_taken_in_by_few_context_only_replays():
    """Many states at once (a drafter that sat steps out, a prompt) replay graphs of the listed
    lengths, largest first, that add up to them: one replay launches its kernels at once, where op
    by op each launch waited on the host."""
    from engine.limits import MAX_STEP
    from engine.speculation.proposers.dflash.graphs import CATCH_UP_SIZES, catch_up_sizes
    from engine.speculation.proposers.dflash.proposer import HOLD

    for n in range(1, 3 * HOLD):
        sizes = catch_up_sizes(n)
        assert sum(sizes) == n and set(sizes) <= set(CATCH_UP_SIZES)
        assert sizes == sorted(sizes, reverse=True)
    # before a pass, the catch-up is a multiple of a step's worth: a few replays at most
    assert max(len(catch_up_sizes(n)) for n in range(MAX_STEP, HOLD + 1, MAX_STEP)) <= 4
    assert catch_up_sizes(1568) == [256] * 6 + [32]  # a 1,584-token prompt: 7 replays before its first pass


def test_default_target_layers_follow_zlab_rule():
    assert default_target_layer_ids(36, 5) == [1, 9, 17, 25, 33]  # z-lab/Qwen3-4B-DFlash-b16
    assert default_target_layer_ids(28, 1) == [14]


def test_random_drafters_read_distinct_layers_even_of_shallow_targets():
    assert distinct_target_layer_ids(36, 5) == [1, 9, 17, 25, 33], "z-lab's rule where it fits"
    assert distinct_target_layer_ids(28, 1) == [14]
    assert default_target_layer_ids(6, 5) == [1, 2, 2, 2, 3]
    assert distinct_target_layer_ids(6, 5) == [0, 1, 2, 4, 5]
    assert default_target_layer_ids(2, 5)[-1] == -1 and distinct_target_layer_ids(2, 5) == [0, 1]
    assert distinct_target_layer_ids(4, 5) == [0, 1, 2, 3]
    assert distinct_target_layer_ids(1, 5) == [0]


# --- the format ---


def test_zlab_checkpoint_loads_with_default_layer_ids(target, tmp_path):
    cfg = zlab_config()
    del cfg["dflash_config"]["target_layer_ids"]
    ids = default_target_layer_ids(TARGET_LAYERS, DRAFT_LAYERS)
    d = load_drafter(str(write_checkpoint(tmp_path, cfg, zlab_weights(n_states=len(ids)))), target)
    assert d.target_layer_ids == tuple(ids) and d.block_size == BLOCK and d.mask_token_id == MASK


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c, w: w.pop("layers.1.mlp.up_proj.weight"), "missing 'layers.1.mlp.up_proj.weight'"),
        (
            lambda c, w: w.update({"layers.0.self_attn.k_proj.weight": torch.zeros(8, HIDDEN)}),
            "has shape (8, 32)",
        ),
        (lambda c, w: w.update({"lm_head.weight": torch.zeros(VOCAB, HIDDEN)}), "no place for"),
        (lambda c, w: c["dflash_config"].pop("mask_token_id"), "no 'dflash_config.mask_token_id'"),
        (lambda c, w: c.pop("block_size"), "no 'block_size'"),
        (lambda c, w: c.update(hidden_size=64), "hidden size 64"),
        (lambda c, w: c.update(vocab_size=32), "vocabulary of 32"),
        (lambda c, w: c.update(num_target_layers=36), "reads a 36-layer target"),
        (lambda c, w: c["dflash_config"].update(target_layer_ids=[1, 6, 2]), "are not layers of"),
    ],
)
def test_bad_checkpoint_is_one_clear_error(target, tmp_path, change, message):
    cfg, weights = zlab_config(), zlab_weights()
    change(cfg, weights)
    with pytest.raises(EngineError) as err:
        load_drafter(str(write_checkpoint(tmp_path, cfg, weights)), target)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_missing_drafter_is_one_clear_error(target, tmp_path):
    with pytest.raises(EngineError, match="not a directory"):
        load_drafter(str(tmp_path / "nowhere"), target)
    with pytest.raises(EngineError, match="no config.json"):
        load_drafter(str(tmp_path), target)


def test_random_drafter_is_written_in_zlab_format(target, tmp_path):
    from safetensors.torch import load_file

    write_random_drafter(tmp_path, target, num_layers=DRAFT_LAYERS, block_size=8)
    names = set(load_file(str(tmp_path / "model.safetensors")))
    assert names == set(zlab_weights())
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["block_size"] == 8 and cfg["dflash_config"]["mask_token_id"] == VOCAB - 1
    assert load_drafter(str(tmp_path), target).block_size == 8


# --- the proposer ---


@pytest.fixture(scope="module")
def random_drafter(target, tmp_path_factory):
    """Random weights in z-lab's format: its drafts are noise, which must not matter."""
    d = write_random_drafter(tmp_path_factory.mktemp("random"), target, num_layers=DRAFT_LAYERS, std=0.3)
    return load_drafter(str(d), target)


@pytest.fixture
def oracle_drafter(target, random_drafter, monkeypatch):
    """The random drafter's pass still runs, but its logits are swapped for the plain reply's
    next tokens, wrong wherever the position is a multiple of 7: whole blocks are accepted,
    then refused part-way, so bonus steps and multi-token acceptance get exercised."""
    full = PROMPT + generate(target, PROMPT, SamplingParams(max_tokens=64)).tokens
    block = random_drafter.block

    def foreseen(anchor):
        block(anchor)
        start = random_drafter.context_length  # the anchor's position
        drafts = []
        for p in range(start + 1, start + BLOCK):
            token = full[p] if p < len(full) else 0
            drafts.append((token + (p % 7 == 0)) % VOCAB)
        return F.one_hot(torch.tensor(drafts), VOCAB).float()

    monkeypatch.setattr(random_drafter, "block", foreseen)
    return random_drafter


@pytest.mark.parametrize("which", ["random_drafter", "oracle_drafter"])
def test_greedy_output_equals_plain_for_every_k(target, which, request):
    drafter = request.getfixturevalue(which)
    sampling = SamplingParams(max_tokens=24)
    plain = generate(target, PROMPT, sampling).tokens
    most_accepted = 0
    for k in range(1, 16):
        result = generate(target, PROMPT, sampling, speculative=DFlashProposer(drafter, k))
        assert result.tokens == plain, f"k={k}"
        assert all(len(s.drafts) <= k for s in result.steps)
        most_accepted = max(most_accepted, *result.metrics.histogram)
    assert target.state_layers == (), "detach stops the target keeping states"
    if which == "oracle_drafter":
        assert most_accepted >= 3, "steps that accept several drafts must have been exercised"


@pytest.mark.parametrize("k", [1, 6, 15])
def test_sampled_output_equals_plain_sampled(target, random_drafter, k):
    sampling = SamplingParams(temperature=0.9, top_p=0.95, seed=7, max_tokens=24)
    plain = generate(target, PROMPT, sampling).tokens
    assert generate(target, PROMPT, sampling, speculative=DFlashProposer(random_drafter, k)).tokens == plain


def test_one_drafter_pass_per_step_whatever_k(target, random_drafter, monkeypatch):
    passes = []
    block = random_drafter.block
    monkeypatch.setattr(random_drafter, "block", lambda anchor: passes.append(anchor) or block(anchor))
    result = generate(
        target, PROMPT, SamplingParams(max_tokens=12), speculative=DFlashProposer(random_drafter, 3)
    )
    drafting_steps = [s for s in result.steps if s.drafts]
    assert len(passes) == len(drafting_steps) > 0
    assert all(s.proposer == "dflash" for s in drafting_steps)


def test_switching_dflash_in_mid_reply_keeps_the_output(target, random_drafter):
    sampling = SamplingParams(max_tokens=48)
    plain = generate(target, PROMPT, sampling).tokens
    gen = Generation(target, PROMPT, sampling)
    # off, then DFlash (k=5) for two steps, off again, DFlash (k=15): each switch is made once the
    # previous one has shown in the steps (the loop takes it up between steps or runs of steps)
    plan = [
        ("off", lambda: DFlashProposer(random_drafter, 5)),
        ("dflash", lambda: None),
        ("off", lambda: DFlashProposer(random_drafter, 15)),
        ("dflash", None),
    ]
    who = []
    for step in gen:
        who.append(step.proposer)
        if plan and who[-1] == plan[0][0] and (who[-1] == "off" or who[-2:] == ["dflash"] * 2):
            _, switch = plan.pop(0)
            if switch is not None:
                gen.speculative = switch()
    assert gen.tokens == plain
    assert plan == [], who
    assert target.state_layers == ()


def test_recaptured_states_equal_the_prefill_states(target, random_drafter):
    ids = PROMPT + [1, 2, 3]
    target.state_layers = random_drafter.state_layers
    seq = target.new_sequence()
    try:
        prefill = target.forward(seq, torch.tensor(ids))[1]
        before = target.pool.k[:, seq.slots(0, len(ids))].clone()
        again = context_states(target, seq, ids)
        assert torch.allclose(again, prefill, atol=1e-5)
        assert torch.equal(target.pool.k[:, seq.slots(0, len(ids))], before), "the cache is left as it was"
    finally:
        target.state_layers = ()
        seq.release()


def test_states_from_mid_context_are_those_of_the_whole(target, random_drafter):
    ids = PROMPT + [1, 2, 3, 4, 5]
    target.state_layers = random_drafter.state_layers
    seq = target.new_sequence()
    try:
        prefill = target.forward(seq, torch.tensor(ids))[1]
        again = context_states(target, seq, ids[5:9], first=5)
        # a 4-token pass sums in another order than the whole prompt's: float32 rounding of
        # states up to ~30 in size, where a state of another position differs by whole units
        torch.testing.assert_close(again, prefill[5:9], rtol=1e-5, atol=1e-4)
    finally:
        target.state_layers = ()
        seq.release()


def test_k_beyond_the_block_and_foreign_target_are_clear_errors(target, random_drafter, tmp_path):
    small = load_drafter(str(write_random_drafter(tmp_path, target, num_layers=1, block_size=8)), target)
    with pytest.raises(EngineError, match="at most 7 drafts"):
        DFlashProposer(small, 8)
    assert DFlashProposer(small).k == 7
    with pytest.raises(EngineError, match="loaded for"):
        generate(make_target(seed=1), PROMPT, SamplingParams(max_tokens=4), speculative=DFlashProposer(small))


@pytest.mark.parametrize("layers", [2, 4])
def test_random_drafter_for_a_shallow_target(layers, tmp_path):
    small = tiny_model("qwen3", vocab=VOCAB, num_layers=layers)
    drafter = load_drafter(str(write_random_drafter(tmp_path, small, std=0.3)), small)
    assert drafter.target_layer_ids == tuple(range(layers)), "every layer, once each"
    sampling = SamplingParams(max_tokens=16)
    plain = generate(small, PROMPT, sampling).tokens
    for k in (1, 7, 15):
        assert generate(small, PROMPT, sampling, speculative=DFlashProposer(drafter, k)).tokens == plain, k


def test_drafts_reach_the_verify_step_as_a_tensor(target, random_drafter, monkeypatch):
    verified = []
    step = target.step

    def recording(seq, ids, *args, **kw):
        verified.append(ids)
        return step(seq, ids, *args, **kw)

    monkeypatch.setattr(target, "step", recording)
    result = generate(
        target, PROMPT, SamplingParams(max_tokens=8), speculative=DFlashProposer(random_drafter, 4)
    )
    drafting = [s for s in result.steps if s.drafts]
    assert len(drafting) > 0
    for step_, ids in zip(drafting, verified[1:]):  # verified[0] is the prompt
        assert isinstance(ids, torch.Tensor), "the drafts are handed over as a tensor, not a list"
        assert ids[1:].tolist() == step_.drafts


def test_drafts_survive_a_verify_step_that_reuses_their_buffer(target, oracle_drafter, monkeypatch):
    """On CUDA the drafter's graph leaves its drafts in the target's graph memory pool, where the
    verify step, queued before the host reads the drafts, may keep its intermediates. Here every
    drafter pass returns one buffer and every target step writes over it."""
    sampling = SamplingParams(max_tokens=24)
    fresh = generate(target, PROMPT, sampling, speculative=DFlashProposer(oracle_drafter, 5))
    buffer = torch.zeros(64, dtype=torch.long)
    draft, step = oracle_drafter.draft, target.step

    def into_buffer(*args, **kw):
        out = draft(*args, **kw)
        buffer[: len(out)].copy_(out)
        return buffer[: len(out)]

    def overwriting(*args, **kw):
        out = step(*args, **kw)
        buffer.fill_(VOCAB - 1)
        return out

    monkeypatch.setattr(oracle_drafter, "draft", into_buffer)
    monkeypatch.setattr(target, "step", overwriting)
    shared = generate(target, PROMPT, sampling, speculative=DFlashProposer(oracle_drafter, 5))
    assert [s.drafts for s in shared.steps] == [s.drafts for s in fresh.steps]
    assert [s.accepted for s in shared.steps] == [s.accepted for s in fresh.steps]
    assert max(s.accepted for s in shared.steps) >= 3
    assert shared.tokens == fresh.tokens


def test_a_measured_acceptance_is_no_higher_where_too_few_blocks_reach(tmp_path):
    """k auto starts from what training measured of each position; past the depth that one block
    in a hundred reaches, the shares are a handful of blocks at the history's rounding (0.004, then
    0.002, reads as a_j = 0.5), so a deeper draft is taken to be kept no more often than the one
    before it; where the shares measure, their ratio stands."""
    from engine.speculation.proposers.dflash.files import measured_acceptance

    shares = [0.864, 0.727, 0.573, 0.417, 0.272, 0.158, 0.08, 0.037, 0.016, 0.008, 0.004, 0.002, 0.001, 0.0, 0.0]
    (tmp_path / "training").mkdir()
    row = [1, 100, 60.0, 2.3, 4.16, shares]
    (tmp_path / "training" / "history.json").write_text(json.dumps({"history": [row], "validation": [row]}))
    rates = measured_acceptance(tmp_path, len(shares) + 1)
    measured = [shares[0]] + [b / a for a, b in zip(shares, shares[1:9])]
    assert rates[:9] == pytest.approx(measured)
    assert rates[9:13] == pytest.approx([rates[8]] * 4)  # not 0.5, 0.5, 0.5, 0.5
    assert rates[13:] == [0.02, 0.02]  # never kept by any block: the floor
