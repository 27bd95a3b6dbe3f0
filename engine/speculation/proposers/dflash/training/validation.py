"""The samples a training run holds out: a few prompts, both their replies, never trained on.

Past the first epoch every training block comes from text the drafter has learnt from, and within
one a prompt's greedy and sampled replies are near-twins, so the acceptance measured on the
training steps runs ahead of what the drafter does on new text (the H200's 12-minute run: 3.48
tokens a step on its last training steps, 2.87 on held-out prompts). The held-out prompts are
chosen by the seed among all the prompts, at most a tenth of them; a prompt is a sample's tokens
before its reply, so both replies of one go the same way.
"""

from __future__ import annotations

import random

VALIDATION_SEED = 104_729  # added to the run's seed: the held-out anchors' generator
MOST_SHARE = 0.1  # of the prompts, held out at most


def split_validation(samples: list, prompts: int, seed: int) -> tuple[list, list]:
    """(training samples, held-out samples), each in the order given: the samples of `prompts`
    prompts drawn with `seed` (fewer where that would be over a tenth of them) held out."""
    keys = [hash(tuple(x.ids[: x.reply_start])) for x in samples]  # ints' hashes are the same in every process
    distinct = sorted(set(keys))
    count = min(prompts, int(MOST_SHARE * len(distinct)))
    held = set(random.Random(seed).sample(distinct, count)) if count > 0 else set()
    training = [x for x, key in zip(samples, keys, strict=True) if key not in held]
    return training, [x for x, key in zip(samples, keys, strict=True) if key in held]
