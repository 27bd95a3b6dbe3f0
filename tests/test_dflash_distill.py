"""Distilling the target into its DFlash drafter: each row trains towards W * the target's own
next-token distribution + (1 - W) * the reply's token. W = 0 is the hard-label training exactly;
the soft target's gradient is autograd's; the target's distribution is read where it predicts each
label; the checkpoint keeps W."""

import json

import pytest
import torch

from engine import SamplingParams, generate_batch, random_model
from engine.speculation.proposers.dflash.training.blocks import Blocks, labels, sample_anchors, teacher_rows
from engine.speculation.proposers.dflash.training.checkpoint import load_checkpoint, save_checkpoint
from engine.speculation.proposers.dflash.training.forward import batch_states, batch_states_and_final
from engine.speculation.proposers.dflash.training.linear_loss import linear_cross_entropy
from engine.speculation.proposers.dflash.training.trainer import CHECKPOINTS, Sample, Trainer, TrainSettings
from specchat.__main__ import main
from tests.conftest import tiny_config

BLOCK = 8


def make_target(family="qwen2", seed=0):
    return random_model(tiny_config(family, vocab=32, num_layers=4), seed=seed, std=0.3, max_context=256)


@pytest.fixture(scope="module")
def corpus():
    """The target's own greedy replies to 12 random prompts."""
    target = make_target()
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 30, (int(torch.randint(6, 14, (1,), generator=g)),), generator=g).tolist()
               for _ in range(12)]
    replies = generate_batch(target, prompts, SamplingParams(temperature=0.0, max_tokens=32), batch_size=12)
    return target, [Sample(p + r.tokens, len(p)) for p, r in zip(prompts, replies, strict=True)]


def settings(**kw):
    base = {"num_layers": 2, "block_size": BLOCK, "anchors": 12, "batch_size": 4, "steps": 6,
            "learning_rate": 1e-2, "warmup_steps": 2, "max_length": 128, "init_std": 0.1}
    return TrainSettings(**{**base, **kw})


def loss_case(seed=0, rows=50, vocab=40, dim=16, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, dim, generator=g, dtype=dtype)
    weight = torch.randn(vocab, dim, generator=g, dtype=dtype)
    teacher = torch.randn(rows, dim, generator=g, dtype=dtype)
    targets = torch.randint(0, vocab, (rows,), generator=g)
    weights = (torch.rand(rows, generator=g) * (torch.rand(rows, generator=g) > 0.2)).to(dtype)
    return hidden.requires_grad_(), weight, teacher, targets, weights


def test_without_distillation_the_loss_is_the_hard_labels_exactly():
    hidden, weight, teacher, targets, weights = loss_case()
    loss, hits = linear_cross_entropy(hidden, weight, targets, weights, chunk_rows=7)
    (grad,) = torch.autograd.grad(loss, hidden)
    same, same_hits = linear_cross_entropy(hidden, weight, targets, weights, chunk_rows=7, teacher=teacher,
                                           distill=0.0)
    (same_grad,) = torch.autograd.grad(same, hidden)
    assert torch.equal(same, loss) and torch.equal(same_grad, grad) and torch.equal(same_hits, hits)


@pytest.mark.parametrize("distill", [1.0, 0.3])
@pytest.mark.parametrize("chunk", [7, 1000])
def test_the_soft_targets_gradient_is_autograds(distill, chunk):
    """The gradient follows sum_r w_r * CE(d_r, W * p_teacher + (1 - W) * one-hot), computed densely
    in float64; the loss and the argmax hits stay the hard label's."""
    hidden, weight, teacher, targets, weights = loss_case(dtype=torch.float64)
    d = hidden @ weight.T
    p = torch.softmax(teacher @ weight.T, dim=-1)
    one_hot = torch.nn.functional.one_hot(targets, weight.shape[0]).to(d.dtype)
    soft = distill * p + (1 - distill) * one_hot
    expected = (weights * -(soft * d.log_softmax(-1)).sum(-1)).sum()
    hard = (weights * -(one_hot * d.log_softmax(-1)).sum(-1)).sum()
    (expected_grad,) = torch.autograd.grad(expected, hidden, retain_graph=True)
    (hard_grad,) = torch.autograd.grad(hard, hidden)

    loss, hits = linear_cross_entropy(hidden, weight, targets, weights, chunk_rows=chunk, teacher=teacher,
                                      distill=distill)
    (grad,) = torch.autograd.grad(2.0 * loss, hidden)
    torch.testing.assert_close(grad, 2.0 * expected_grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(loss.double(), hard.detach(), atol=1e-4, rtol=1e-5)
    assert torch.equal(hits, d.argmax(-1) == targets)
    assert not torch.allclose(expected_grad, hard_grad, atol=1e-3)  # the soft target is not the label's


def test_distillation_without_the_teachers_rows_is_refused():
    hidden, weight, _, targets, weights = loss_case()
    with pytest.raises(ValueError, match="teacher"):
        linear_cross_entropy(hidden, weight, targets, weights, distill=0.5)


def test_each_rows_teacher_is_the_position_before_its_label():
    """Row (sample, block, i) predicts ids[a + i]: its teacher is the target's final hidden at
    a + i - 1, in block_loss's row order; positions past the sequence are clamped (uncounted)."""
    b, s = 2, 9
    final = (100 * torch.arange(b)[:, None] + torch.arange(s)[None, :]).float()[:, :, None].expand(b, s, 3)
    ids = torch.arange(b * s).view(b, s)
    anchors = torch.tensor([[2, 5], [0, 7]])
    blocks = Blocks(anchors, torch.tensor([[True, True], [True, False]]))
    rows = teacher_rows(final, blocks, block_size=4)
    assert rows.shape == (b * 2 * 3, 3)
    expected = [[2, 3, 4], [5, 6, 7], [100, 101, 102], [107, 108, 108]]
    assert rows[:, 0].view(4, 3).tolist() == [[float(x) for x in r] for r in expected]
    wanted, counted = labels(ids, torch.ones(b, s), blocks, 4)
    label_at = wanted.flatten() - s * torch.arange(b).repeat_interleave(6)  # ids count positions
    inside = counted.flatten()
    assert torch.equal(rows[inside, 0] % 100, (label_at[inside] - 1).float())


def test_on_greedy_replies_the_teachers_argmax_is_each_label(corpus):
    """The replies are the target's greedy tokens, so its distribution where each row's teacher
    is read peaks at that row's label: the teacher is read one position before the label."""
    target, samples = corpus
    trainer = Trainer(target, samples, settings(distill=1.0), "/tmp/unused-distill")
    target.state_layers = trainer.drafter.state_layers
    try:
        ids, mask, _, final = trainer._tensors(samples[:4])
    finally:
        target.state_layers = ()
    blocks = sample_anchors(mask, 12, torch.Generator().manual_seed(0))
    wanted, counted = labels(ids, mask, blocks, BLOCK)
    predicted = target.decoder.logits(teacher_rows(final, blocks, BLOCK)).argmax(-1)
    inside = counted.flatten()
    assert inside.sum() > 100
    assert torch.equal(predicted[inside], wanted.flatten()[inside])


def serving_final(target, ids: list[int]) -> torch.Tensor:
    """The final hidden of the target's own paged prefill, [len(ids), H]."""
    seq = target.new_sequence()
    try:
        seq.append(len(ids))
        ctx = target.context(seq, 0, len(ids))
        with torch.no_grad():
            return target.decoder(torch.tensor(ids), torch.arange(len(ids)), ctx)
    finally:
        seq.release()


@pytest.mark.parametrize("family", ["qwen2", "qwen3", "llama"])
def test_the_batched_pass_gives_the_targets_final_hidden(family):
    target = make_target(family)
    target.state_layers = (0, 2)
    g = torch.Generator().manual_seed(5)
    sequences = [torch.randint(0, 31, (n,), generator=g).tolist() for n in (40, 25, 33)]
    ids = torch.zeros(3, 40, dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(seq)
    states, final = batch_states_and_final(target, ids)
    assert torch.equal(states, batch_states(target, ids))
    for row, seq in enumerate(sequences):
        torch.testing.assert_close(final[row, : len(seq)], serving_final(target, seq), atol=1e-4, rtol=1e-3)


def test_a_run_without_distillation_never_runs_the_targets_last_layers(corpus):
    target, samples = corpus
    trainer = Trainer(target, samples, settings(), "/tmp/unused-distill")
    target.state_layers = (1,)
    try:
        assert trainer._tensors(samples[:2])[3] is None
    finally:
        target.state_layers = ()


def test_a_distilled_run_writes_its_drafter_and_resumes_with_its_weight(corpus, tmp_path):
    target, samples = corpus
    whole = Trainer(target, samples, settings(distill=0.5), tmp_path / "whole")
    whole.run()
    assert (tmp_path / "whole" / "config.json").is_file() and (tmp_path / "whole" / "model.safetensors").is_file()
    history = json.loads((tmp_path / "whole" / CHECKPOINTS / "history.json").read_text())
    assert history["settings"]["distill"] == 0.5
    hard = Trainer(target, samples, settings(), tmp_path / "hard")
    hard.run()
    assert [h[3] for h in hard.state.history][1:] != [h[3] for h in whole.state.history][1:]

    Trainer(target, samples, settings(distill=0.5), tmp_path / "parts").run(stop_after=3)
    resumed = Trainer(target, samples, settings(), tmp_path / "parts", resume=True)  # W from the checkpoint
    assert resumed.settings.distill == 0.5
    resumed.run()
    assert [h[3:] for h in resumed.state.history] == [h[3:] for h in whole.state.history]


def test_a_checkpoint_from_before_distillation_resumes_without_it(corpus, tmp_path):
    target, samples = corpus
    Trainer(target, samples, settings(), tmp_path / "old").run(stop_after=1)
    folder = tmp_path / "old" / CHECKPOINTS
    checkpoint = load_checkpoint(folder)
    del checkpoint["settings"]["distill"]
    save_checkpoint(folder, checkpoint)
    resumed = Trainer(target, samples, settings(distill=1.0), tmp_path / "old", resume=True)
    assert resumed.settings.distill == 0.0 and resumed.state.step == 1


@pytest.mark.parametrize("weight", ["1.5", "-0.1", "nan"])
def test_a_distillation_weight_outside_zero_to_one_is_refused_in_one_line(tmp_path, capsys, weight):
    assert main(["train-dflash", "--model", str(tmp_path / "none.gguf"), "--device", "cpu", "--prompts", "p",
                 "--replies", "r", "--out", str(tmp_path / "d"), "--distill", weight]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "--distill must be between 0 and 1" in err.splitlines()[-1]
