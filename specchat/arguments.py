"""The command line's options: those several commands share (the model, speculation, sampling),
and those of generate, dflash-prompts and train-dflash (bench's are in bench/arguments.py).

Building them asks the engine only for light names (limits, dtypes, the registry's declarations),
so `specchat --help` and a mistyped option answer at once, without loading torch; options.py turns
the parsed options into engine objects.
"""

from __future__ import annotations

import argparse

from engine import AUTO, DEFAULT_DRAFT_VOCAB, DTYPES, MAX_K, proposer_specs

BATCH_INVARIANT_HELP = (
    "GPU: compute each token the same way in decode and verify steps, so bf16 replies with "
    "speculation are plain decoding's exactly (slower decode steps)"
)


def add_target_options(g) -> None:
    """--device, --dtype, --max-context: what every command that loads a model takes."""
    g.add_argument("--device", default=None, help="cuda or cpu (default: cuda when present)")
    g.add_argument("--dtype", default=None, choices=list(DTYPES))
    g.add_argument("--max-context", type=int, default=None,
                   help="tokens of KV cache per model (default 4096, or the model's positions if fewer)")


def add_need_options(g) -> None:
    """One option per thing a registered proposer needs (--draft MODEL, --dflash DRAFTER, ...)."""
    for spec in proposer_specs():
        if spec.need is not None:
            g.add_argument(f"--{spec.need.option}", metavar=spec.need.metavar, help=spec.need.help)


def k_value(text: str) -> int | str:
    """A command line's k: a whole number of drafts per step, or auto."""
    if text.strip().lower() == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"k must be a whole number from 1 to {MAX_K} or auto, got {text!r}") from None


def add_proposer_option(g) -> None:
    names = [s.name for s in proposer_specs()]
    g.add_argument("--proposer", choices=[*names, AUTO], default=None,
                   help="who drafts (default: the one whose --OPTION is given): " + ", ".join(names)
                   + "; auto: each step, the one expected to pay best among those given")


def add_model_arguments(p: argparse.ArgumentParser, default_model: str, speculation: bool = True) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--model", default=default_model, help="pack name, HF directory, GGUF file or hub id")
    add_target_options(g)
    g.add_argument("--eager", action="store_true", help="no CUDA graphs (the target and a draft model)")
    g.add_argument("--batch-invariant", action="store_true", help=BATCH_INVARIANT_HELP)
    if speculation:
        add_speculation_arguments(p)
    a = p.add_argument_group("sampling")
    a.add_argument("--temperature", type=float, default=0.0)
    a.add_argument("--top-k", type=int, default=0)
    a.add_argument("--top-p", type=float, default=1.0)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--max-tokens", type=int, default=256)


def add_speculation_arguments(p: argparse.ArgumentParser) -> None:
    s = p.add_argument_group("speculation")
    add_proposer_option(s)
    s.add_argument("--speculate", type=k_value, metavar="K",
                   help="n-gram (prompt lookup) drafts, K per step (auto: chosen each step)")
    add_need_options(s)
    s.add_argument("-k", type=k_value, default=None,
                   help="drafts per step, or auto: chosen each step (default: the proposer's own)")
    s.add_argument("--sample-drafts", action="store_true",
                   help="the draft model or DFlash drafter samples its drafts from its own distribution "
                        "(min(1, p/q) rule)")


def add_generate_arguments(p) -> None:
    p.add_argument("--prompts", required=True, help="JSONL file: one {\"prompt\": ...} or {\"messages\": [...]} a line")
    p.add_argument("--out", required=True, help="JSONL file the replies are appended to (a rerun resumes it)")
    p.add_argument("--batch-size", type=int, default=64, help="sequences decoded together (default 64)")
    p.add_argument("--system", default=None, help="system prompt for \"prompt\" lines")
    p.add_argument("--raw", action="store_true", help="no chat template: a \"prompt\" is the text to continue")


def add_prompts_arguments(p) -> None:
    p.add_argument("--out", required=True, help="JSONL file of prompts to write")
    p.add_argument("--count", type=int, default=4000, help="prompts to make (default 4000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--held-out", action="store_true",
                   help="prompts from the held-out modules (for evaluation; never trained on)")
    p.add_argument("--long-chars", type=int, default=None,
                   help="characters a long unit of code (a class, a run of a module's definitions) may hold "
                        "(default 5,000: about 1,400 tokens, leaving a 2,048-token training sample room for a reply)")
    p.add_argument("--long-only", action="store_true",
                   help="every prompt on a long unit: contexts as long as a pasted file (to measure a drafter there)")


def add_train_arguments(p) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--model", required=True, help="the target: pack name, HF directory, GGUF file or hub id")
    add_target_options(g)
    p.add_argument("--out", default=None, help="drafter folder (default for a pack: <cache>/<pack>/dflash, "
                                               "where the chat finds it)")
    p.add_argument("--prompts", required=True, help="the prompts file (specchat dflash-prompts)")
    p.add_argument("--replies", required=True, nargs="+", help="the target's replies (specchat generate), "
                                                                "e.g. a greedy and a sampled file")
    p.add_argument("--layers", type=int, default=2,
                   help="drafter layers (default 2: on the H200 four learnt more in equal training time, but their "
                        "pass costs more and two gave the better bench rows)")
    p.add_argument("--minutes", type=float, default=None, help="time budget of the training (resumes included)")
    p.add_argument("--stop-after", type=float, default=None, metavar="MINUTES",
                   help="end this call after MINUTES (checkpointed; --resume continues the same schedule)")
    p.add_argument("--epochs", type=int, default=None,
                   help="passes over the data (default: one, or as many as --minutes allows)")
    p.add_argument("--steps", type=int, default=None, help="total steps (default: the epochs, or the budget)")
    p.add_argument("--batch-size", type=int, default=8,
                   help="samples per step (default 8: on the H200 it learnt as much per sample as 4, at 1.2x the samples/s)")
    p.add_argument("--anchors", type=int, default=256, help="blocks per sample per step (default 256)")
    p.add_argument("--max-length", type=int, default=2048, help="tokens per sample; longer ones are cut")
    p.add_argument("--learning-rate", type=float, default=6e-4)
    p.add_argument("--warmup-steps", type=int, default=20,
                   help="steps of linear warm-up to the peak learning rate (default 20)")
    p.add_argument("--standardize-features", action="store_true",
                   help="train fc on the target's states scaled to unit RMS per channel (folded into the "
                        "written weights)")
    p.add_argument("--start-from-target", action=argparse.BooleanOptionalAction, default=True,
                   help="start the drafter's layers as copies of the target's last ones (default; on the H200 "
                        "its loss ran 0.65 lower at 2 minutes); --no-start-from-target: random weights")
    p.add_argument("--start-from", metavar="DIR", default=None,
                   help="start from a drafter trained before (its folder; its weights and draft vocabulary, "
                        "a fresh optimizer and schedule): training goes on past one machine's time")
    p.add_argument("--distill", type=float, default=0.0, metavar="W",
                   help="train towards W * the target's own next-token distribution + (1 - W) * its reply's "
                        "token (default 0: the reply's tokens alone); a resumed run keeps its own W")
    p.add_argument("--gamma", type=float, default=7.0,
                   help="the loss weight of block position i is exp(-(i-1)/gamma) (default 7, the paper's for "
                        "blocks of 16): smaller puts the first drafts first")
    p.add_argument("--draft-vocab", type=int, default=DEFAULT_DRAFT_VOCAB, metavar="N",
                   help="draft over the N tokens the training replies use most (their rows of lm_head: a "
                        "cheaper loss and drafter pass; written beside the drafter as draft_vocab.json; "
                        "default 32768, measured faster to train and better in equal time); 0: the "
                        "target's whole vocabulary, as z-lab's drafters")
    p.add_argument("--checkpoint-minutes", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--resume", action="store_true", help="continue the run whose checkpoint is in --out")
