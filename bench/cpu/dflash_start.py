"""Where a DFlash drafter's training starts, on the CPU: random weights against the target's last
layers (`--start-from-target`), on the same batches in the same order (dflash_ab.py says how).

    PYTHONPATH=. python bench/cpu/dflash_start.py GGUF_0.5B PROMPTS GREEDY [--steps 120]
"""

from __future__ import annotations

from dflash_ab import arguments, compare, run, samples_of


def main() -> None:
    args = arguments(__doc__.splitlines()[0]).parse_args()
    target, samples = samples_of(args)
    runs = {"random": run(target, samples, args.steps, start_from_target=False),
            "target": run(target, samples, args.steps, start_from_target=True)}
    compare(runs, "target start minus random", [(0, 40), (40, None)])


if __name__ == "__main__":
    main()
