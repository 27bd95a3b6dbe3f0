"""The training data: prompts made here from installed code, replies made by the target itself.

`build_prompts` writes chat tasks (tasks.py) on code units (sources.py) as lines `specchat
generate` reads ({"id", "messages", "task", "module", "source"}); the target answers them there,
greedy and sampled, in batches. `read_samples` joins the prompts with the replies into token
sequences through the target's own chat template, the one it will serve with. `data_card`
says what went in and what was kept out.
"""

from __future__ import annotations

import gzip
import json
import lzma
import random
from collections import Counter
from pathlib import Path

from engine.errors import EngineError
from engine.speculation.proposers.dflash.training.sources import (
    BENCH_MODULES,
    HELD_OUT_MODULES,
    LONG_MAX_CHARS,
    SKIPPED_FOLDERS,
    code_units,
    roots,
    source_files,
    top_module,
)
from engine.speculation.proposers.dflash.training.tasks import make_task
from engine.speculation.proposers.dflash.training.trainer import Sample

UNITS_PER_FILE = 3  # spread the prompts over many files rather than the longest ones
LONG_SHARE = 0.4  # of a file's units taken, about this share long ones (sources.LONG_MAX_LINES) where it has them
PACKAGE_SHARE = 0.04  # no top-level package (say the codecs of `encodings`) gives more of the prompts


def build_prompts(count: int, seed: int = 0, held_out: bool = False, long_chars: int = LONG_MAX_CHARS,
                  long_only: bool = False) -> list[dict]:
    """`count` prompt lines (fewer if the code runs out), from the training modules, or from the
    held-out ones with held_out=True. The same arguments give the same lines. Long units (a whole
    class, a run of a module's definitions) hold up to `long_chars` characters; with long_only
    every prompt is on one (contexts as long as a pasted file, to measure a drafter there)."""
    rng = random.Random(seed)
    root_of = {name: str(root) for name, root in roots()}
    lines = []
    per_package: Counter = Counter()
    for source, module, path in interleaved(source_files(held_out), rng):
        package = (source, top_module(module))
        if per_package[package] >= max(UNITS_PER_FILE, count * PACKAGE_SHARE):
            continue
        units = code_units(source, module, path, long_chars)
        if long_only:
            units = [u for u in units if u.long]
        for unit in pick_units(units, rng):
            per_package[package] += 1
            kind, message = make_task(unit, rng)
            prefix = "eval" if held_out else "train"
            lines.append({"id": f"{prefix}-{len(lines)}", "messages": [{"role": "user", "content": message}],
                          "task": kind, "module": module, "source": source,
                          "root": root_of[source]})
            if len(lines) == count:
                return lines
    return lines


def pick_units(units: list, rng: random.Random) -> list:
    """Up to UNITS_PER_FILE of a file's units, each slot a long one with chance LONG_SHARE where
    the file has long ones left, a short one otherwise (or whatever is left)."""
    pools = [[u for u in units if not u.long], [u for u in units if u.long]]
    for pool in pools:
        rng.shuffle(pool)
    picked = []
    for _ in range(min(UNITS_PER_FILE, len(units))):
        want = 1 if rng.random() < LONG_SHARE else 0
        pool = pools[want] if pools[want] else pools[1 - want]
        picked.append(pool.pop())
    return picked


def interleaved(files: list[tuple[str, str, Path]], rng: random.Random) -> list[tuple[str, str, Path]]:
    """The files in an order that spreads the prompts: taken from each source in turn (the standard
    library as present as the installed packages), and within a source from each top-level package
    in turn, so one large package (or dozens of near-identical codec modules) cannot fill the set."""
    by_source: dict[str, dict[str, list]] = {}
    for f in files:
        by_source.setdefault(f[0], {}).setdefault(top_module(f[1]), []).append(f)
    streams = []
    for packages in by_source.values():
        groups = list(packages.values())
        rng.shuffle(groups)
        for group in groups:
            rng.shuffle(group)
        streams.append(round_robin(groups))
    return round_robin(streams)


def round_robin(groups: list[list]) -> list:
    return [g[i] for i in range(max(map(len, groups), default=0)) for g in groups if i < len(g)]


def write_jsonl(path: str | Path, lines: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)


OPENERS = {".gz": gzip.open, ".xz": lzma.open}  # compressed prompt and reply files, as kept in bench/training-data


def read_jsonl(path: str | Path) -> list[dict]:
    path = Path(path)
    opener = OPENERS.get(path.suffix)
    try:
        if opener is None:
            text = path.read_text(encoding="utf-8")
        else:
            with opener(path, "rt", encoding="utf-8") as f:
                text = f.read()
    except (OSError, UnicodeDecodeError, EOFError, lzma.LZMAError) as err:
        raise EngineError(f"cannot read {path}: {err}") from None
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise EngineError(f"{path} line {number}: not JSON ({err.msg})") from None
    return lines


def read_samples(target, prompts_path: str | Path, replies_paths: list[str | Path]) -> list[Sample]:
    """One sample per reply: the prompt's messages through the target's chat template, then the
    reply's token ids as the target generated them (its stop token included)."""
    prompts = {p["id"]: p for p in read_jsonl(prompts_path) if "messages" in p}
    encoded: dict[str, list[int]] = {}  # a prompt answered greedy and sampled is encoded once
    samples = []
    for path in replies_paths:
        for number, reply in enumerate(read_jsonl(path)):
            prompt = prompts.get(reply.get("id"))
            if prompt is None:
                raise EngineError(f"{path}: reply {reply.get('id')!r} has no prompt in {prompts_path}")
            tokens = list(reply.get("tokens") or ())
            if any(not 0 <= t < target.config.vocab_size for t in tokens):
                raise EngineError(f"{path}: reply {reply.get('id')!r} has token ids outside {target.name}'s "
                                  "vocabulary: its replies were made by another model")
            if number == 0:
                check_made_by(target, path, reply, tokens)
            if prompt["id"] not in encoded:
                encoded[prompt["id"]] = target.encode_chat(prompt["messages"])
            ids = encoded[prompt["id"]]
            samples.append(Sample(ids + tokens, len(ids)))
    if not samples:
        raise EngineError(f"no replies in {', '.join(map(str, replies_paths))}: run specchat generate first")
    return samples


def check_made_by(target, path, reply: dict, tokens: list[int]) -> None:
    """A drafter learns its target's own replies: a file whose first reply's tokens do not spell
    its text under this target's tokenizer was made by another model (its ids in range)."""
    if "response" not in reply:
        return
    text = target.tokenizer.decode(tokens, skip_special_tokens=True)
    if text.strip() != reply["response"].strip():
        raise EngineError(f"{path}: its replies were not made by {target.name} (their tokens do not spell "
                          "their text with its tokenizer): generate them with this model")


def data_card(prompts_path: str | Path, replies_paths: list[str | Path], samples: list[Sample],
              max_length: int, validation: int = 0, draft_vocab: int = 0) -> dict:
    """What the drafter was trained on: sources, counts, tokens, and what was kept out (among the
    samples, `validation` held out to measure it while it trains; `draft_vocab`: the tokens it
    drafts over when fewer than the target's, the replies' most frequent)."""
    prompts = read_jsonl(prompts_path)
    return {
        # where the prompts' code was read: the machine that made them, not necessarily this one
        "sources": {p["source"]: p["root"] for p in prompts if "root" in p} or {n: str(r) for n, r in roots()},
        "prompts": len(prompts),
        "prompt_files": str(prompts_path),
        "reply_files": [str(p) for p in replies_paths],
        "tasks": dict(Counter(p.get("task", "?") for p in prompts)),
        "by_source": dict(Counter(p.get("source", "?") for p in prompts)),
        "modules": len({p.get("module") for p in prompts}),
        "samples": len(samples),
        "prompt_tokens": sum(s.reply_start for s in samples),
        "reply_tokens": sum(len(s.ids) - s.reply_start for s in samples),
        "max_length": max_length,
        "validation_samples": validation,
        "draft_vocab": draft_vocab,
        "excluded": {
            "bench_modules": list(BENCH_MODULES),
            "held_out_modules": list(HELD_OUT_MODULES),
            "folders": sorted(SKIPPED_FOLDERS),
            "private_modules": "names starting with an underscore",
        },
    }


def write_data_card(folder: str | Path, card: dict) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data-card.json").write_text(json.dumps(card, indent=2))
    rows = [
        "# Training data of this DFlash drafter", "",
        (f"{card['samples']} samples ({card['prompts']} prompts from {card['modules']} modules), "
         f"{card['prompt_tokens']:,} prompt tokens and {card['reply_tokens']:,} reply tokens written by the "
         f"target itself; samples cut at {card['max_length']} tokens. Of these, "
         f"{card.get('validation_samples', 0)} (both replies of a few prompts) never trained: the run measured the "
         "drafter on them (training/history.json, \"validation\")."
         + (f" The drafter drafts over the {card['draft_vocab']:,} tokens these replies use most "
            "(draft_vocab.json)." if card.get("draft_vocab") else "")), "",
        "Sources: " + ", ".join(f"{k} ({v})" for k, v in card["sources"].items()) + ".", "",
        "Tasks: " + ", ".join(f"{k} {v}" for k, v in sorted(card["tasks"].items())) + ".", "",
        ("Kept out: the bench's modules (" + ", ".join(card["excluded"]["bench_modules"]) + "), the held-out "
         "modules used for evaluation (" + ", ".join(card["excluded"]["held_out_modules"]) + "), private "
         "modules and the folders " + ", ".join(card["excluded"]["folders"]) + "."), "",
    ]
    (folder / "DATA.md").write_text("\n".join(rows))
