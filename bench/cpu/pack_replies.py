"""Keep a DFlash training set in the repository, small: its prompts and the target's replies
as xz-compressed JSONL, each reply without its text (training reads the token ids; the text is
their decoding), so a later GPU machine trains without answering the prompts again.

    python bench/cpu/pack_replies.py bench/dflash-data bench/training-data/qwen2.5-coder-1.5b
    python bench/cpu/pack_replies.py OUT_OF_A_GPU_CALL bench/training-data/qwen2.5-coder-1.5b/more --set more

reads greedy / sampled .jsonl[.gz] (with --set NAME: NAME-greedy ..., as `SET=NAME dflash.sh data`
brings them back) and, where there, prompts.jsonl[.gz] from the first folder, and writes
greedy.jsonl.xz, sampled.jsonl.xz and prompts.jsonl.xz to the second, then prints their sizes.
Prompts are kept whole (answered or not: `specchat generate` skips the answered ones on a rerun).
"""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
from pathlib import Path

REPLY_FIELDS = ("id", "line", "tokens", "finish")


def read_text(folder: Path, name: str, required: bool = True) -> str | None:
    for path in (folder / name, folder / f"{name}.gz"):
        if path.exists():
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rt", encoding="utf-8") as f:
                return f.read()
    if required:
        raise SystemExit(f"no {name} or {name}.gz in {folder}")
    return None


def slim(replies: str) -> str:
    """Each reply's id, prompt line, token ids and why it ended, one JSON object a line."""
    rows = (json.loads(line) for line in replies.splitlines() if line.strip())
    return "".join(json.dumps({k: r[k] for k in REPLY_FIELDS if k in r}) + "\n" for r in rows)


def write_xz(path: Path, text: str) -> None:
    path.write_bytes(lzma.compress(text.encode("utf-8"), preset=9 | lzma.PRESET_EXTREME))
    print(f"{path}: {path.stat().st_size / 1e6:.2f} MB ({text.count(chr(10))} lines)")


def main() -> None:
    p = argparse.ArgumentParser(description="Pack a DFlash training set for the repository.")
    p.add_argument("source")
    p.add_argument("out")
    p.add_argument("--set", default="", help="the replies' file prefix (NAME-greedy.jsonl.gz ...)")
    args = p.parse_args()
    source, out = Path(args.source), Path(args.out)
    prefix = f"{args.set}-" if args.set else ""
    out.mkdir(parents=True, exist_ok=True)
    prompts = read_text(source, f"{prefix}prompts.jsonl", required=False)
    if prompts is not None:
        write_xz(out / "prompts.jsonl.xz", prompts)
    for name in ("greedy", "sampled"):
        write_xz(out / f"{name}.jsonl.xz", slim(read_text(source, f"{prefix}{name}.jsonl")))


if __name__ == "__main__":
    main()
