"""Training a DFlash drafter: the training forward is the serving forward, blocks see what they
would see when serving, a short run learns its target, and checkpoints resume to the same state."""

import json

import pytest
import torch

from engine import SamplingParams, generate, load_drafter, random_model, DFlashProposer
from engine.speculation.proposers.dflash.files import drafter_config
from engine.speculation.proposers.dflash.network import DFlashDrafter
from engine.speculation.proposers.dflash.training.blocks import (
    Blocks,
    attention_mask,
    expected_accepted,
    labels,
    sample_anchors,
)
from engine.speculation.proposers.dflash.training.forward import drafter_hidden, target_states
from tests.conftest import tiny_config

BLOCK = 8


def make_target(seed=0):
    cfg = tiny_config("qwen2", vocab=32, num_layers=4)
    return random_model(cfg, seed=seed, std=0.3, max_context=256)


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


def test_expected_accepted_counts_the_run_of_right_drafts():
    correct = torch.tensor([[[True, True, False, True], [False, True, True, True]]])
    assert expected_accepted(correct, torch.tensor([[True, True]])) == pytest.approx(1 + (2 + 0) / 2)
    assert expected_accepted(correct, torch.tensor([[True, False]])) == pytest.approx(3.0)
