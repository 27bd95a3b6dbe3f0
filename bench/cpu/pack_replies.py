"""Keep a DFlash training set in the repository, small: its prompts and the target's replies
as xz-compressed JSONL, each reply without its text (training reads the token ids; the text is
their decoding), so a later GPU machine trains without answering the prompts again.

    python bench/cpu/pack_replies.py bench/dflash-data bench/training-data/qwen2.5-coder-1.5b

reads prompts.jsonl[.gz] and greedy / sampled .jsonl[.gz] from the first folder and writes
prompts.jsonl.xz, greedy.jsonl.xz and sampled.jsonl.xz to the second, then prints their sizes.
Prompts are kept whole (answered or not: `specchat generate` skips the answered ones on a rerun).
"""

from __future__ import annotations

import gzip
import json
import lzma
import sys
from pathlib import Path

REPLY_FIELDS = ("id", "line", "tokens", "finish")


def read_text(folder: Path, name: str) -> str:
    for path in (folder / name, folder / f"{name}.gz"):
        if path.exists():
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rt", encoding="utf-8") as f:
                return f.read()
    raise SystemExit(f"no {name} or {name}.gz in {folder}")


def slim(replies: str) -> str:
    """Each reply's id, prompt line, token ids and why it ended, one JSON object a line."""
    rows = (json.loads(line) for line in replies.splitlines() if line.strip())
    return "".join(json.dumps({k: r[k] for k in REPLY_FIELDS if k in r}) + "\n" for r in rows)


def write_xz(path: Path, text: str) -> None:
    path.write_bytes(lzma.compress(text.encode("utf-8"), preset=9 | lzma.PRESET_EXTREME))
    print(f"{path}: {path.stat().st_size / 1e6:.2f} MB ({text.count(chr(10))} lines)")


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    source, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    write_xz(out / "prompts.jsonl.xz", read_text(source, "prompts.jsonl"))
    for name in ("greedy", "sampled"):
        write_xz(out / f"{name}.jsonl.xz", slim(read_text(source, f"{name}.jsonl")))


if __name__ == "__main__":
    main()
