"""Training a DFlash drafter: the training forward is the serving forward, blocks see what they
would see when serving, a short run learns its target, and checkpoints resume to the same state."""

import json

import pytest
import torch
import torch.nn.functional as F

from engine import (
    DFlashProposer,
    EngineError,
    SamplingParams,
    generate,
    load_drafter,
    random_model,
)
from engine.speculation.proposers.dflash.files import drafter_config
from engine.speculation.proposers.dflash.network import DFlashDrafter, zlab_weight_shapes
from engine.speculation.proposers.dflash.training.blocks import (
    Blocks,
    accepted_at,
    attention_mask,
    labels,
    sample_anchors,
)
from engine.speculation.proposers.dflash.training.evaluate import measure_tau
from engine.speculation.proposers.dflash.training.forward import (
    batch_states,
    block_loss,
    drafter_hidden,
    target_states,
)
from engine.speculation.proposers.dflash.training.linear_loss import linear_cross_entropy
from engine.speculation.proposers.dflash.training.order import epoch_order
from engine.speculation.proposers.dflash.training.trainer import LENGTH_STEP, Sample, Trainer
from tests.conftest import tiny_config
from tests.dflash_corpus import BLOCK, make_target, settings


def random_drafter(target, seed=1, block=BLOCK):
    torch.manual_seed(seed)
    drafter = DFlashDrafter(drafter_config(target, num_layers=2, block_size=block))
    with torch.no_grad():
        for name, p in drafter.named_parameters():
            p.copy_(1.0 + 0.1 * torch.randn_like(p) if "norm" in name else 0.3 * torch.randn_like(p))
    return drafter


def test_training_forward_computes_the_serving_blocks():
    target = make_target()
    drafter = random_drafter(target)
    ids = torch.randint(0, 31, (1, 40), generator=torch.Generator().manual_seed(3))
    target.state_layers = drafter.state_layers
    states = target_states(target, ids[0].tolist())[None]
    anchors = torch.tensor([[5, 17, 30]])
    with torch.no_grad():
        hidden = drafter_hidden(drafter, target.decoder.embed_tokens, states, ids,
                                Blocks(anchors, torch.ones_like(anchors, dtype=torch.bool)))
        trained = target.decoder.logits(hidden.view(3, BLOCK, -1)[:, 1:])
    drafter.bind(target, target.max_context)
    for row, a in enumerate(anchors[0].tolist()):
        drafter.clear()
        drafter.extend(states[0, :a])
        served = drafter.block(int(ids[0, a]))
        torch.testing.assert_close(trained[row], served, rtol=1e-4, atol=1e-4)


def test_blocks_attending_a_chunk_at_a_time_compute_what_one_call_does():
    """Chunks of blocks against the context and their own keys: the same hidden states and
    gradients as every block in one call (a block never sees another)."""
    target = make_target()
    ids = torch.randint(0, 31, (2, 40), generator=torch.Generator().manual_seed(4))
    blocks = Blocks(torch.tensor([[3, 9, 17, 25, 30], [6, 11, 12, 20, 33]]),
                    torch.tensor([[True] * 5, [True, True, False, True, True]]))
    results = []
    for chunk_blocks in (5, 2):  # one call; three calls of 2, 2 and 1 blocks
        drafter = random_drafter(target)
        target.state_layers = drafter.state_layers
        states = torch.stack([target_states(target, row.tolist()) for row in ids])
        hidden = drafter_hidden(drafter, target.decoder.embed_tokens, states, ids, blocks, chunk_blocks=chunk_blocks)
        hidden.square().sum().backward()
        results.append((hidden.detach(), [p.grad for p in drafter.parameters()]))
    (one, grads_one), (chunked, grads_chunked) = results
    torch.testing.assert_close(chunked, one, rtol=1e-5, atol=1e-5)
    for a, b in zip(grads_chunked, grads_one, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_anchors_sit_where_the_next_token_is_reply():
    loss_mask = torch.zeros(2, 30)
    loss_mask[0, 10:] = 1
    loss_mask[1, 25:28] = 1  # three reply tokens: three anchors at most
    blocks = sample_anchors(loss_mask, 6, torch.Generator().manual_seed(0))
    assert blocks.anchors.shape == (2, 6)
    assert blocks.keep[0].all() and blocks.keep[1].sum() == 3
    for row in range(2):
        for a in blocks.anchors[row][blocks.keep[row]].tolist():
            assert loss_mask[row, a + 1] == 1
    assert len(set(blocks.anchors[0].tolist())) == 6


def test_a_block_sees_the_context_before_its_anchor_and_its_own_block():
    blocks = Blocks(torch.tensor([[3, 7]]), torch.tensor([[True, True]]))
    mask = attention_mask(blocks, context_length=10, block_size=4)[0, 0]  # [8, 10 + 8]
    assert mask.shape == (8, 18)
    assert mask[0, :3].all() and not mask[0, 3:10].any()  # block 0: context 0..2
    assert mask[4, :7].all() and not mask[4, 7:10].any()  # block 1: context 0..6
    assert mask[:4, 10:14].all() and not mask[:4, 14:].any()  # its own block, both ways, not the other
    assert mask[4:, 14:].all() and not mask[4:, 10:14].any()


def test_labels_are_the_tokens_after_the_anchor_inside_the_reply():
    ids = torch.arange(12)[None]
    loss_mask = torch.zeros(1, 12)
    loss_mask[0, 4:] = 1
    wanted, counted = labels(ids, loss_mask, Blocks(torch.tensor([[3, 9]]), torch.tensor([[True, True]])), 4)
    assert wanted[0, 0].tolist() == [4, 5, 6] and counted[0, 0].all()
    assert wanted[0, 1, :2].tolist() == [10, 11] and counted[0, 1].tolist() == [True, True, False]


def test_tau_counts_the_run_of_right_drafts():
    correct = torch.tensor([[[True, True, False, True], [False, True, True, True]]])
    assert 1 + sum(accepted_at(correct, torch.tensor([[True, True]]))) == pytest.approx(1 + (2 + 0) / 2)
    assert 1 + sum(accepted_at(correct, torch.tensor([[True, False]]))) == pytest.approx(3.0)
    # the acceptance curve: block 1 survives positions 1-2, block 2 none
    assert accepted_at(correct, torch.tensor([[True, True]])) == pytest.approx([0.5, 0.5, 0.0, 0.0])


@pytest.mark.parametrize("standardize", [False, True])
def test_a_short_run_learns_to_draft_the_targets_replies(corpus, tmp_path, standardize):
    target, samples, held_out = corpus
    trainer = Trainer(target, samples, settings(standardize_features=standardize), tmp_path / "drafter")
    trainer.checkpoint()  # the untrained drafter, as it starts
    before = measure_tau(target, load_drafter(str(tmp_path / "drafter"), target), held_out, 40, stop_ids=[])
    losses = []
    trainer.run(lambda report: losses.append(report.loss))
    drafter = load_drafter(str(tmp_path / "drafter"), target)  # through z-lab's files, as --dflash loads it
    after = measure_tau(target, drafter, held_out, 40, stop_ids=[])
    assert len(losses) == 30
    assert sum(losses[-5:]) < 0.5 * sum(losses[:5])
    assert before < 1.5 and after > before + 2.0, (before, after)
    for ids in held_out:  # drafted or not, the reply is plain decoding's
        plain = generate(target, ids, SamplingParams(temperature=0.0, max_tokens=40))
        drafted = generate(target, ids, SamplingParams(temperature=0.0, max_tokens=40),
                           speculative=DFlashProposer(drafter))
        assert drafted.tokens == plain.tokens


@pytest.mark.parametrize("standardize", [False, True])
def test_a_resumed_run_reaches_the_uninterrupted_runs_weights(corpus, tmp_path, standardize):
    target, samples, _ = corpus
    whole = Trainer(target, samples, settings(steps=12, standardize_features=standardize), tmp_path / "whole")
    whole.run()
    Trainer(target, samples, settings(steps=12, standardize_features=standardize), tmp_path / "parts").run(stop_after=5)
    resumed = Trainer(target, samples, settings(steps=12, standardize_features=standardize), tmp_path / "parts",
                      resume=True)
    assert resumed.state.step == 5
    resumed.run()
    assert [h[3:] for h in resumed.state.history] == [h[3:] for h in whole.state.history]  # loss, tau
    for (name, a), (_, b) in zip(whole.drafter.state_dict().items(), resumed.drafter.state_dict().items()):
        assert torch.equal(a, b), name


def test_the_written_drafter_is_in_zlab_format(corpus, tmp_path):
    target, samples, _ = corpus
    trainer = Trainer(target, samples, settings(steps=1), tmp_path / "d")
    trainer.run()
    config = json.loads((tmp_path / "d" / "config.json").read_text())
    assert config["architectures"] == ["DFlashDraftModel"] and config["block_size"] == BLOCK
    assert config["dflash_config"]["target_layer_ids"] == list(trainer.drafter.target_layer_ids)
    names = set(safe_open_keys(tmp_path / "d" / "model.safetensors"))
    assert names == set(zlab_weight_shapes(trainer.drafter.config))


def test_a_trained_drafter_brings_what_its_training_measured(corpus, tmp_path):
    target, samples, _ = corpus
    trainer = Trainer(target, samples, settings(steps=4), tmp_path / "d")
    trainer.run()
    drafter = load_drafter(str(tmp_path / "d"), target)
    assert len(drafter.measured) == BLOCK - 1 and all(0.0 < a < 1.0 for a in drafter.measured)
    assert DFlashProposer(drafter).known_acceptance() == drafter.measured  # k auto starts from it
    (tmp_path / "d" / "training" / "history.json").unlink()  # copied without its run: nothing known
    assert load_drafter(str(tmp_path / "d"), target).measured is None


def test_a_few_prompts_are_held_out_and_measure_the_drafter_as_it_learns(corpus, tmp_path):
    """Both replies of a held-out prompt stay out of training; every validation_minutes of
    training the drafter is measured on them (the same blocks each time): the measurement rises
    as it learns, history.json keeps it, and a loaded drafter's k auto starts from the last one,
    not from the training steps' (past an epoch, on text the drafter has learnt from)."""
    from engine.speculation.proposers.dflash.files import measured_acceptance

    target, samples, _ = corpus
    twins = samples + [Sample(list(x.ids), x.reply_start) for x in samples]  # a greedy and a sampled reply each
    trainer = Trainer(target, twins, settings(validation_prompts=3, validation_minutes=0.0), tmp_path / "d")
    held = {tuple(x.ids[: x.reply_start]) for x in trainer.validation}
    assert len(held) == 3 and len(trainer.validation) == 6 and len(trainer.samples) == len(twins) - 6
    assert held.isdisjoint(tuple(x.ids[: x.reply_start]) for x in trainer.samples)
    state = trainer.run()
    rows = state.validation
    assert len(rows) == 30 and [r[0] for r in rows] == list(range(1, 31))  # every step, minutes being 0
    assert rows[-1][4] > rows[0][4] + 1.0, (rows[0][4], rows[-1][4])
    history = json.loads((tmp_path / "d" / "training" / "history.json").read_text())
    assert history["validation"] == rows and history["validation_samples"] == 6
    first = measured_acceptance(tmp_path / "d", BLOCK)
    assert first[0] == pytest.approx(min(0.98, max(0.02, rows[-1][5][0])))
    del history["validation"]  # a run from before held-out samples: its last steps' curves
    (tmp_path / "d" / "training" / "history.json").write_text(json.dumps(history))
    assert measured_acceptance(tmp_path / "d", BLOCK) != first
    again = Trainer(target, twins, settings(validation_prompts=3), tmp_path / "again")
    assert [x.ids for x in again.validation] == [x.ids for x in trainer.validation]  # the seed's split


def test_a_run_resumes_only_on_the_samples_it_started_on(corpus, tmp_path):
    """A resumed run's epochs and held-out split follow from its samples: others (a prompt set
    added since) are one clear line, not a run that silently trains on a shifted order."""
    target, samples, _ = corpus
    Trainer(target, samples, settings(steps=4), tmp_path / "d").run(stop_after=2)
    with pytest.raises(EngineError, match="other samples"):
        Trainer(target, samples[:-1], settings(steps=4), tmp_path / "d", resume=True)
    assert Trainer(target, samples, settings(steps=4), tmp_path / "d", resume=True).state.step == 2


def test_a_run_from_before_held_out_samples_resumes_on_all_of_them(corpus, tmp_path):
    target, samples, _ = corpus
    Trainer(target, samples, settings(steps=4), tmp_path / "d").run(stop_after=2)
    path = tmp_path / "d" / "training" / "checkpoint.pt"
    saved = torch.load(path, weights_only=False)
    del saved["settings"]["validation_prompts"], saved["data"]  # as such runs wrote it
    torch.save(saved, path)
    resumed = Trainer(target, samples, settings(steps=4, validation_prompts=16), tmp_path / "d", resume=True)
    assert resumed.validation == [] and len(resumed.samples) == len(samples)


def test_at_most_a_tenth_of_the_prompts_is_held_out():
    from engine.speculation.proposers.dflash.training.validation import split_validation

    samples = [Sample([p, p, 9, 9], 2) for p in range(30)]
    for prompts, held in ((16, 3), (2, 2), (0, 0)):
        training, validation = split_validation(samples, prompts, seed=0)
        assert len(validation) == held and len(training) + held == 30
    assert split_validation(samples[:9], 16, seed=0)[1] == []  # under ten prompts: none
    assert split_validation(samples, 3, 0)[1] != split_validation(samples, 3, 1)[1]


def test_resume_without_a_checkpoint_says_so(corpus, tmp_path):
    target, samples, _ = corpus
    with pytest.raises(EngineError, match="nothing to resume"):
        Trainer(target, samples, settings(), tmp_path / "none", resume=True)


def safe_open_keys(path):
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        return list(f.keys())


def test_a_time_budget_ends_the_run_and_its_cosine_and_may_span_epochs(corpus, tmp_path, monkeypatch):
    """48 samples of 4 a step make 12 steps an epoch; with 30 s and steps that take 1 s (a clock
    that moves only while a step runs), the run takes 30 steps, two and a half epochs, and its
    learning rate reaches the cosine's floor (a tenth of the peak) as the budget ends."""
    from engine.speculation.proposers.dflash.training import trainer as module

    target, samples, _ = corpus
    clock = [0.0]
    monkeypatch.setattr(module.time, "perf_counter", lambda: clock[0])

    def ticking(trainer):
        step = trainer.step
        trainer.step = lambda: (clock.__setitem__(0, clock[0] + 1.0), step())[1]
        return trainer

    rates = []
    state = ticking(Trainer(target, samples, settings(steps=None, minutes=0.5), tmp_path / "budget")).run(
        lambda report: rates.append(report.learning_rate))
    assert state.step == 30 and state.epoch == 2
    peak = settings().learning_rate
    assert rates[-1] == pytest.approx(0.1 * peak, rel=0.05) and max(rates) == pytest.approx(peak, rel=0.05)
    capped = ticking(Trainer(target, samples, settings(steps=None, minutes=0.5, epochs=1), tmp_path / "capped"))
    assert capped.run().step == 12  # --epochs caps what the budget would allow


@pytest.mark.parametrize("family", ["qwen2", "qwen3", "llama"])
def test_the_batched_target_pass_gives_each_sequence_its_serving_states(family):
    """Training reads the target's states for a whole batch in one dense causal pass; each
    sequence's rows are the states the serving prefill computes for it alone, pads aside."""
    target = random_model(tiny_config(family, vocab=32, num_layers=4), seed=0, std=0.3, max_context=256)
    target.state_layers = random_drafter(target).state_layers
    g = torch.Generator().manual_seed(5)
    sequences = [torch.randint(0, 31, (n,), generator=g).tolist() for n in (40, 25, 33)]
    ids = torch.zeros(3, 40, dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(seq)
    batched = batch_states(target, ids)
    for row, seq in enumerate(sequences):
        torch.testing.assert_close(batched[row, : len(seq)], target_states(target, seq), atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("layers", [1, 2, 5])
def test_a_drafter_of_any_depth_reads_the_five_target_layers(layers):
    """SpecForge's rule for a 28-layer target: layers 1, 7, 13, 19, 25, for a drafter of any depth
    (a shallow drafter needs the target's features no less)."""
    target = random_model(tiny_config("qwen2", vocab=32, num_layers=28), seed=0, max_context=64)
    cfg = drafter_config(target, num_layers=layers)
    assert list(cfg.target_layer_ids) == [1, 7, 13, 19, 25] and cfg.shape.num_layers == layers


def test_an_epoch_takes_every_sample_once_in_batches_of_like_lengths():
    """A batch is padded to its longest sample: the epoch's batches group similar lengths (far
    less padding than a plain shuffle), every sample comes once, and the order is the seed's."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(50, 2048, (1000,), generator=g).tolist()
    order = epoch_order(lengths, 8, seed=0, epoch=0)
    assert sorted(order) == list(range(1000))
    assert order == epoch_order(lengths, 8, seed=0, epoch=0) != epoch_order(lengths, 8, seed=0, epoch=1)

    def padded(o):
        return sum(8 * max(lengths[i] for i in o[s : s + 8]) for s in range(0, len(o), 8))

    shuffled = torch.randperm(1000, generator=g).tolist()
    assert padded(order) < 0.7 * padded(shuffled)
    first_batches = [max(lengths[i] for i in order[s : s + 8]) for s in range(0, 80, 8)]
    assert first_batches != sorted(first_batches)  # the batches themselves come in no length order


def test_the_loss_made_in_chunks_is_autograds_cross_entropy():
    """lm_head and the weighted cross-entropy in one step that keeps no logits: its loss, its
    argmax hits and its gradient are autograd's over the whole matrix, whatever the chunk."""
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(50, 16, generator=g, requires_grad=True)
    weight = torch.randn(40, 16, generator=g)
    targets = torch.randint(0, 40, (50,), generator=g)
    weights = torch.rand(50, generator=g) * (torch.rand(50, generator=g) > 0.2)
    logits = hidden @ weight.T
    expected = (F.cross_entropy(logits, targets, reduction="none") * weights).sum()
    (expected_grad,) = torch.autograd.grad(expected, hidden)
    for chunk in (7, 50, 1000):
        loss, hits = linear_cross_entropy(hidden, weight, targets, weights, chunk_rows=chunk)
        (grad,) = torch.autograd.grad(2.0 * loss, hidden)
        torch.testing.assert_close(loss, expected.detach(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(grad, 2.0 * expected_grad, atol=1e-5, rtol=1e-5)
        assert torch.equal(hits, logits.argmax(-1) == targets)


def test_a_training_step_is_the_same_in_any_chunking(corpus, monkeypatch):
    """The blocks' loss, acceptance curve and every drafter gradient do not depend on how many
    rows of logits exist at once."""
    from engine.speculation.proposers.dflash.training import linear_loss

    target, samples, _ = corpus
    trainer = Trainer(target, samples, settings(), "/tmp/unused-chunks")
    monkeypatch.setattr(target, "state_layers", trainer.drafter.state_layers)
    ids, mask, states, _ = trainer._tensors(samples[:4])
    blocks = sample_anchors(mask, 24, torch.Generator().manual_seed(0))
    results = []
    for rows in (10**6, 37):
        monkeypatch.setattr(linear_loss, "CHUNK_ROWS", rows)
        trainer.drafter.zero_grad()
        loss, accepted = block_loss(trainer.drafter, target, states, ids, mask, blocks, 7.0)
        loss.backward()
        results.append((loss.detach(), accepted, [p.grad.clone() for p in trainer.drafter.parameters()]))
    (whole, curve_whole, grads_whole), (chunked, curve_chunked, grads_chunked) = results
    torch.testing.assert_close(chunked, whole, atol=1e-5, rtol=1e-5)
    assert torch.equal(curve_chunked, curve_whole)
    for a, b in zip(grads_whole, grads_chunked, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_a_drafter_trained_on_standardized_states_is_written_to_read_raw_ones(corpus, tmp_path, monkeypatch):
    """With standardized features the run trains fc on the states divided by each channel's RMS;
    the written drafter has that folded into fc, so it computes, from the raw states every loader
    gives it, what the run computed from the scaled ones."""
    target, samples, _ = corpus
    trainer = Trainer(target, samples, settings(steps=3, standardize_features=True), tmp_path / "d")
    trainer.run()
    scale = trainer.feature_scale
    assert scale is not None and scale.shape == (len(trainer.drafter.state_layers) * target.config.hidden_size,)
    assert scale.max() / scale.min() > 2  # the channels' scales differ: the fold is not a no-op
    written = load_drafter(str(tmp_path / "d"), target)
    monkeypatch.setattr(target, "state_layers", trainer.drafter.state_layers)
    ids, mask, _, _ = trainer._tensors(samples[:3])
    raw = batch_states(target, ids)
    blocks = sample_anchors(mask, 6, torch.Generator().manual_seed(1))
    with torch.no_grad():
        trained = drafter_hidden(trainer.drafter, target.decoder.embed_tokens, raw / scale, ids, blocks)
        served = drafter_hidden(written, target.decoder.embed_tokens, raw, ids, blocks)
    torch.testing.assert_close(served, trained, atol=2e-4, rtol=1e-3)


def test_a_drafter_started_from_the_target_begins_as_its_last_layers(corpus, tmp_path):
    """--start-from-target: the drafter's layers are the target's last ones (biases dropped), its
    final norm the target's, and fc passes the deepest feature layer through unchanged."""
    target, samples, _ = corpus
    trainer = Trainer(target, samples, settings(start_from_target=True), tmp_path / "d")
    drafter, layers = trainer.drafter, target.decoder.layers
    theirs = layers[len(layers) - len(drafter.layers):]
    for mine, copied in zip(drafter.layers, theirs, strict=True):
        for name, p in copied.named_parameters():
            if not name.endswith("bias"):
                assert torch.equal(mine.get_parameter(name), p.float()), name
    assert torch.equal(drafter.norm.weight, target.decoder.norm.weight.float())
    ids, _ = trainer.padded(samples[:2])
    target.state_layers = drafter.state_layers
    states = batch_states(target, ids)
    deepest = states.unflatten(-1, (len(drafter.state_layers), -1))[..., -1, :]
    torch.testing.assert_close(drafter.fc(states), deepest)


def test_standardized_features_keep_the_targets_start(corpus, tmp_path, monkeypatch):
    """Standardizing the states would change what a copied fc reads: the first batch's scale is
    folded into it, so the drafter starts as the same function of the target's states."""
    target, samples, _ = corpus
    raw = Trainer(target, samples, settings(start_from_target=True), tmp_path / "raw")
    scaled = Trainer(target, samples, settings(start_from_target=True, standardize_features=True), tmp_path / "s")
    monkeypatch.setattr(target, "state_layers", raw.drafter.state_layers)
    ids, mask, standardized, _ = scaled._tensors(samples[:4])
    _, _, states, _ = raw._tensors(samples[:4])
    blocks = sample_anchors(mask, 6, torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(drafter_hidden(scaled.drafter, target.decoder.embed_tokens, standardized, ids, blocks),
                                   drafter_hidden(raw.drafter, target.decoder.embed_tokens, states, ids, blocks),
                                   atol=2e-4, rtol=1e-3)


def test_a_drafter_deeper_than_its_target_cannot_start_from_it(corpus, tmp_path):
    target, samples, _ = corpus
    with pytest.raises(EngineError, match="at most as many layers"):
        Trainer(target, samples, settings(num_layers=len(target.decoder.layers) + 1, start_from_target=True),
                tmp_path / "d")


def test_padding_and_unkept_blocks_change_no_loss_or_gradient(corpus, monkeypatch):
    """Steps are rounded to a few shapes (trainer.LENGTH_STEP, ANCHOR_STEP): the pads after a
    batch's samples and the blocks that are not kept leave the loss, the acceptance curve and
    every gradient as they were."""
    target, samples, _ = corpus
    trainer = Trainer(target, samples, settings(), "/tmp/unused-padding")
    monkeypatch.setattr(target, "state_layers", trainer.drafter.state_layers)
    ids, mask, states, _ = trainer._tensors(samples[:3])
    assert ids.shape[1] % LENGTH_STEP == 0
    real = int(max(len(x.ids) for x in samples[:3]))
    blocks = sample_anchors(mask[:, :real], 5, torch.Generator().manual_seed(0))
    more = Blocks(torch.cat([blocks.anchors, torch.zeros_like(blocks.anchors)], 1),
                  torch.cat([blocks.keep, torch.zeros_like(blocks.keep)], 1))
    results = []
    for s, b in ((real, blocks), (ids.shape[1], more)):
        trainer.drafter.zero_grad()
        loss, accepted = block_loss(trainer.drafter, target, states[:, :s], ids[:, :s], mask[:, :s], b, 7.0)
        loss.backward()
        results.append((loss.detach(), accepted, [p.grad.clone() for p in trainer.drafter.parameters()]))
    (loss_a, curve_a, grads_a), (loss_b, curve_b, grads_b) = results
    torch.testing.assert_close(loss_b, loss_a, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(curve_b, curve_a)
    for a, b in zip(grads_a, grads_b, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


def test_a_steps_block_count_is_rounded_up_with_unkept_blocks():
    loss_mask = torch.zeros(2, 300)
    loss_mask[0, 100:170] = 1  # 70 reply tokens: 70 anchors, rounded up to 128 blocks
    loss_mask[1, 250:260] = 1
    blocks = sample_anchors(loss_mask, 256, torch.Generator().manual_seed(0), multiple=64)
    assert blocks.anchors.shape == (2, 128)
    assert blocks.keep.sum(dim=1).tolist() == [70, 10]
    assert sample_anchors(loss_mask, 100, torch.Generator(), multiple=64).anchors.shape == (2, 100)


def test_a_drafter_trained_before_starts_a_run_with_its_weights_and_vocabulary(corpus, tmp_path):
    """--start-from: training goes on from a drafter's files (a fresh optimizer and schedule),
    drafting over the same tokens, so a run can carry on past one machine's time."""
    target, samples, _ = corpus
    first = Trainer(target, samples, settings(steps=20, draft_vocab=12), tmp_path / "first")
    losses = []
    first.run(lambda report: losses.append(report.loss))
    later = Trainer(target, samples, settings(steps=5, draft_vocab=20, start_from=str(tmp_path / "first")),
                    tmp_path / "later")
    for (name, a), (_, b) in zip(first.drafter.state_dict().items(), later.drafter.state_dict().items()):
        torch.testing.assert_close(b, a.to(target.dtype).float(), rtol=0, atol=0, msg=name)  # as written
    assert later.vocab.ids.tolist() == first.vocab.ids.tolist()  # its own 12 tokens, not 20 new ones
    resumed = []
    later.run(lambda report: resumed.append(report.loss))
    assert resumed[0] < 0.5 * losses[0]  # it starts where the first run got to, not from scratch


def test_a_run_starts_only_from_a_drafter_shaped_as_it(corpus, tmp_path):
    target, samples, _ = corpus
    Trainer(target, samples, settings(steps=1), tmp_path / "two").run()
    with pytest.raises(EngineError, match="--start-from .*2 layers.*this run trains 3"):
        Trainer(target, samples, settings(num_layers=3, start_from=str(tmp_path / "two")), tmp_path / "three")
    with pytest.raises(EngineError, match="no config.json"):
        Trainer(target, samples, settings(start_from=str(tmp_path)), tmp_path / "other")


def test_the_target_pass_may_take_cudnns_attention_alone(monkeypatch):
    """SPECCHAT_CUDNN_TARGET=1 lets the frozen target's pass choose cuDNN's kernel (few shapes,
    no backward); the engine's other attention keeps leaving it out."""
    from torch.nn.attention import SDPBackend

    from engine.runtime import attention
    from engine.speculation.proposers.dflash.training.forward import target_backends

    assert target_backends() is None
    monkeypatch.setenv("SPECCHAT_CUDNN_TARGET", "1")
    assert SDPBackend.CUDNN_ATTENTION in target_backends()
    assert SDPBackend.CUDNN_ATTENTION not in attention.FUSED_BACKENDS
