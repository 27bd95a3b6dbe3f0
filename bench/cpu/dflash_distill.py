"""Distillation against hard labels for a DFlash drafter's training, on the CPU: the same batches
in the same order, trained on the reply's tokens alone (--distill 0) and towards W * the target's
own next-token distribution + (1 - W) * the reply's token (`--distill W`, default 1); both report
the hard-label loss (dflash_ab.py says how).

    PYTHONPATH=. python bench/cpu/dflash_distill.py GGUF_0.5B PROMPTS GREEDY [--steps 120] [--distill 1.0]

GREEDY is plain JSON lines (read_samples does not read gzip: zcat greedy.jsonl.gz first).
"""

from __future__ import annotations

from dflash_ab import WINDOW, arguments, compare, run, samples_of


def main() -> None:
    p = arguments(__doc__.splitlines()[0])
    p.add_argument("--distill", type=float, default=1.0)
    args = p.parse_args()
    target, samples = samples_of(args)
    runs = {"hard": run(target, samples, args.steps, distill=0.0),
            f"W={args.distill:g}": run(target, samples, args.steps, distill=args.distill)}
    compare(runs, "distilled minus hard", [(a, a + 2 * WINDOW) for a in range(0, args.steps, 2 * WINDOW)])


if __name__ == "__main__":
    main()
