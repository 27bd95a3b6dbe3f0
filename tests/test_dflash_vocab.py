"""A drafter vocabulary: a drafter trained (--draft-vocab N) and drafting over the N tokens its
target's replies use most, through their rows of lm_head; the output stays plain decoding's."""

import json

import pytest
import torch

from engine import DFlashProposer, Generation, SamplingParams, generate, load_drafter, write_random_drafter
from engine.errors import EngineError
from engine.speculation.proposers.dflash.training.evaluate import measure_tau
from engine.speculation.proposers.dflash.training.forward import block_loss
from engine.speculation.proposers.dflash.training.trainer import Trainer
from engine.speculation.proposers.dflash.vocab import DraftVocab, frequent_tokens, read_vocab, write_vocab
from tests.conftest import tiny_model
from tests.dflash_corpus import settings


def test_the_most_frequent_tokens_are_kept_ties_to_the_smaller_id():
    replies = [[5, 5, 7, 1], [7, 9, 9, 5], [1]]
    assert frequent_tokens(replies, 2) == [1, 5]  # 5 three times; 1, 7 and 9 twice: the smallest id
    assert frequent_tokens(replies, 3) == [1, 5, 7]
    assert frequent_tokens(replies, 10) == [1, 5, 7, 9]


def test_a_vocabulary_maps_its_positions_to_token_ids_and_back():
    head = torch.randn(10, 4)
    vocab = DraftVocab([2, 3, 7], head)
    assert vocab.index.tolist() == [-1, -1, 0, 1, -1, -1, -1, 2, -1, -1]
    assert torch.equal(vocab.head, head[[2, 3, 7]])
    assert vocab.to_tokens(torch.tensor([2, 0])).tolist() == [7, 2]
    full = vocab.spread(torch.tensor([[1.0, 2.0, 3.0]]), 10)
    assert full[0, [2, 3, 7]].tolist() == [1.0, 2.0, 3.0] and torch.isinf(full[0, [0, 1, 4]]).all()
    with pytest.raises(EngineError, match="distinct ascending"):
        DraftVocab([3, 2], head)


def test_a_vocabulary_file_round_trips_and_a_bad_one_is_one_line(tmp_path):
    assert read_vocab(tmp_path) is None
    write_vocab(tmp_path, [1, 4, 9])
    assert read_vocab(tmp_path) == [1, 4, 9]
    (tmp_path / "draft_vocab.json").write_text('{"token_ids": "many"}')
    with pytest.raises(EngineError, match="cannot be read as a drafter vocabulary"):
        read_vocab(tmp_path)


def test_a_vocabulary_of_every_token_scores_the_blocks_as_the_whole_lm_head_does(corpus, monkeypatch):
    """The loss over a drafter vocabulary is the loss over its tokens' rows: with every token, in
    order, it is the whole vocabulary's, bit for bit; with fewer, another."""
    from engine.speculation.proposers.dflash.training.blocks import sample_anchors

    target, samples, _ = corpus
    trainer = Trainer(target, samples, settings(steps=1), "/tmp/unused-vocab")
    monkeypatch.setattr(target, "state_layers", trainer.drafter.state_layers)
    ids, loss_mask, states, _ = trainer._tensors(samples[:4])
    blocks = sample_anchors(loss_mask, 24, torch.Generator().manual_seed(0))
    whole = block_loss(trainer.drafter, target, states, ids, loss_mask, blocks, 7.0)
    every = DraftVocab(list(range(target.config.vocab_size)), target.decoder.lm_head.weight)
    same = block_loss(trainer.drafter, target, states, ids, loss_mask, blocks, 7.0, vocab=every)
    assert torch.equal(whole[0], same[0]) and torch.equal(whole[1], same[1])
    few = DraftVocab(frequent_tokens([x.ids[x.reply_start :] for x in samples], 4), target.decoder.lm_head.weight)
    loss, _ = block_loss(trainer.drafter, target, states, ids, loss_mask, blocks, 7.0, vocab=few)
    assert torch.isfinite(loss) and not torch.equal(loss, whole[0])


def test_a_drafter_trained_over_its_own_vocabulary_drafts_only_those_tokens_and_keeps_the_output(corpus, tmp_path):
    target, samples, held_out = corpus
    kept = 12
    assert len({t for x in samples for t in x.ids[x.reply_start :]}) > kept  # some replies' tokens left out
    trainer = Trainer(target, samples, settings(draft_vocab=kept), tmp_path / "d")
    losses = []
    trainer.run(lambda report: losses.append(report.loss))
    assert sum(losses[-5:]) < 0.5 * sum(losses[:5])
    written = json.loads((tmp_path / "d" / "draft_vocab.json").read_text())["token_ids"]
    assert written == frequent_tokens([x.ids[x.reply_start :] for x in samples], kept)
    drafter = load_drafter(str(tmp_path / "d"), target)
    assert drafter.vocab is not None and drafter.vocab.ids.tolist() == written
    assert measure_tau(target, drafter, held_out, 40, stop_ids=[]) > 2.0  # it learnt to draft
    proposer = DFlashProposer(drafter)
    for ids in held_out:
        plain = generate(target, ids, SamplingParams(temperature=0.0, max_tokens=40))
        drafted = generate(target, ids, SamplingParams(temperature=0.0, max_tokens=40), speculative=proposer)
        assert drafted.tokens == plain.tokens
    drafts = {t for ids in held_out
              for step in Generation(target, ids, SamplingParams(temperature=0.0, max_tokens=40), (),
                                     speculative=DFlashProposer(drafter))
              for t in step.drafts}
    assert drafts and drafts <= set(written)  # it drafts only its own tokens


def test_a_random_drafter_can_draft_over_a_vocabulary_of_its_own_as_trained_ones_do(tmp_path):
    """The step bench times drafters of the shape train-dflash writes: a vocabulary of N tokens."""
    target = tiny_model()
    drafter = load_drafter(str(write_random_drafter(tmp_path, target, num_layers=1, draft_vocab=40)), target)
    assert len(drafter.vocab) == 40 and read_vocab(tmp_path) == list(range(40))
    drafts = drafter.draft([torch.randn(5, len(drafter.state_layers) * target.config.hidden_size)], 3)
    assert drafts.shape == (drafter.block_size - 1,) and int(drafts.max()) < 40
    plain = load_drafter(str(write_random_drafter(tmp_path / "whole", target, num_layers=1)), target)
    assert plain.vocab is None
