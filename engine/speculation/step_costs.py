"""What a step of each length costs on this machine: timed once per model, device and dtype, then
followed as the run goes.

The adaptive policy weighs drafts against time, so it needs the cost of a verify step of every
length 1..MAX_STEP before it has run most of them. A one-off timing gives that seed (kept in the
user cache, so later runs start from it at once); the run's own step times then take over through
a moving average per length, and lengths not run yet follow the seed scaled by how far the
measured lengths have drifted from it.
"""

from __future__ import annotations

import json
import re
import time
import weakref
from collections.abc import Callable

import torch

from engine.limits import MAX_STEP
from engine.loading.packs import cache_root
from engine.runtime.sampling import SamplingParams

FORMAT = 1
FOLLOW = 0.1  # weight of the newest measurement in a moving average
OUTLIER = 1.5  # a measurement counts for at most this times the average so far
SEED_CONTEXT = 512  # tokens already in the cache while the seed is timed


def follow(measured: dict[int, float], n: int, seconds: float) -> float:
    """Move the moving average of length n in `measured` towards a step of `seconds`, and return
    the seconds it counted. A step the host stalled in (a collection, another thread) is not what
    the step costs: taken at face value it would make plain steps look dear until the next plain
    step, which then never comes; so it counts for at most OUTLIER times the average so far."""
    before = measured.get(n)
    if before is not None:
        seconds = min(seconds, OUTLIER * before)
    measured[n] = seconds if before is None else before + FOLLOW * (seconds - before)
    return seconds


class Seed:
    """A fixed cost by length (a table's starting point): asked once per n, and as a list for upto()."""

    def __init__(self, seed: Callable[[int], float]):
        self.seed = seed
        self._seeds: dict[int, float] = {}
        self._list: list[float] = []  # [0, seed(1) .. seed(n)]: the same list until a longer one is asked for

    def __call__(self, n: int) -> float:
        found = self._seeds.get(n)
        if found is None:
            found = self._seeds[n] = self.seed(n)
        return found

    def upto(self, top: int) -> list[float]:
        if len(self._list) <= top:
            self._list = [0.0] + [self(n) for n in range(1, top + 1)]
        return self._list


class RelativeCost:
    """One kind of step's costs against a plainer table (`base`): its own moving averages where
    it has run, else the base's cost times how much dearer its steps have run (`ratio`, moving),
    so the lengths it has not run follow the machine as the base does. A proposer's verify steps
    against the target's (a DFlash step keeps the target's states for the drafter), and those run
    after a pass drafted ahead against those of its own run after none (the pass's device time
    comes first); a CostTable against its seed."""

    def __init__(self, base: Seed | RelativeCost):
        self.base = base
        self.measured: dict[int, float] = {}
        self.ratio = 1.0
        # upto()'s, and the base's list it was made from: the base's upto() returns the same
        # list until the base measures a step, so the policy's reads each step are a lookup
        self._costs: list[float] | None = None
        self._from: list[float] | None = None

    def __call__(self, n: int) -> float:
        found = self.measured.get(n)
        return found if found is not None else self.base(n) * self.ratio

    def upto(self, top: int) -> list[float]:
        """[cost(0) = 0, cost(1) .. cost(top)]: the policy reads this every step, and it changes
        only when a step is measured."""
        base = self.base.upto(top)
        if self._costs is None or base is not self._from or len(self._costs) <= top:
            measured, ratio = self.measured, self.ratio
            self._costs = [0.0] + [measured[n] if n in measured else base[n] * ratio for n in range(1, top + 1)]
            self._from = base
        return self._costs

    def add(self, n: int, seconds: float) -> None:
        self._costs = None
        seconds = follow(self.measured, n, seconds)
        base = self.base(n)
        if base > 0:
            self.ratio += FOLLOW * (seconds / base - self.ratio)


class CostTable(RelativeCost):
    """Seconds of a step of length n (or of drafting n tokens): the moving average of the times
    measured at n, else the seed at n times the drift (`ratio`) measured elsewhere."""

    def __init__(self, seed: Callable[[int], float]):
        super().__init__(Seed(seed))

    def seeded(self, n: int) -> float:
        return self.base(n)

    def upto(self, top: int) -> list[float]:
        # the seed never changes: the list holds until a step is measured (add)
        if self._costs is not None and len(self._costs) > top:
            return self._costs
        return super().upto(top)


class OnePassCost(CostTable):
    """The cost of drafting k tokens where one pass drafts them all, whatever k (a DFlash block):
    each measurement prices every k. Kept per k, the k a reply began with would be the only one
    measured, while every other k stayed at its seed, dearer or cheaper alike: k auto would keep
    the first k for that, not for its drafts (the H200, twenty-first run: k 9-15 every step where
    drafts past the fifth were never kept)."""

    def __call__(self, n: int) -> float:
        return super().__call__(1) if n > 0 else 0.0

    def add(self, n: int, seconds: float) -> None:
        super().add(1, seconds)

    def upto(self, top: int) -> list[float]:
        if self._costs is None or len(self._costs) <= top:
            self._costs = [0.0] + [self(1)] * top
        return self._costs


_tables: dict[int, tuple[weakref.ref, CostTable]] = {}  # id(model) -> (the model, its table)


def step_costs(model) -> CostTable:
    """The table of step costs of `model` (its seed timed or read from the cache on first use),
    one per model object for the life of the process."""
    ref, table = _tables.get(id(model), (None, None))
    if ref is None or ref() is not model:
        seed = seed_costs(model)
        table = CostTable(lambda n: seed[min(max(n, 1), len(seed)) - 1])
        key = id(model)
        _tables[key] = (weakref.ref(model, lambda _: _tables.pop(key, None)), table)
    return table


def seed_costs(model) -> list[float]:
    """Seconds of a step of 1..MAX_STEP tokens, from the cache or timed now (then cached)."""
    path = cache_root() / "step-costs" / f"{cache_key(model)}.json"
    try:
        saved = json.loads(path.read_text())
        if saved.get("format") == FORMAT and len(saved["seconds"]) == MAX_STEP:
            return [float(s) for s in saved["seconds"]]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    seconds = time_steps(model)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"format": FORMAT, "model": model.name, "seconds": seconds}))
    except OSError:
        pass  # an unwritable cache only means timing again next run
    return seconds


def cache_key(model) -> str:
    device = torch.cuda.get_device_name(model.device) if model.device.type == "cuda" else "cpu"
    threads = "" if model.device.type == "cuda" else f"-{torch.get_num_threads()}t"
    parts = [
        model.name,
        device + threads,
        str(model.dtype).removeprefix("torch."),
        model.backend,
        f"ctx{model.max_context}",
    ]
    if model.batch_invariant:
        parts.append("invariant")
    if model.eager:
        parts.append("eager")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(parts))


@torch.inference_mode()
def time_steps(model, repeats: int | None = None) -> list[float]:
    """The median time of a step of each length 1..MAX_STEP, the host reading its tokens as the
    generation loop does, after SEED_CONTEXT tokens of context (or what the cache has free: a
    reply may be holding pages)."""
    repeats = repeats or (20 if model.device.type == "cuda" else 3)
    free = model.pool.num_free * model.pool.page_size
    context = max(1, min(SEED_CONTEXT, model.max_context, free) - MAX_STEP - model.pool.page_size)
    greedy = SamplingParams()
    seq = model.new_sequence()
    try:
        model.step(seq, [0] * context, greedy, last_only=True)
        out = []
        for n in range(1, MAX_STEP + 1):
            times = []
            for i in range(repeats + 1):  # the first is a warm-up
                seq.truncate(context)
                t0 = time.perf_counter()
                model.step(seq, [0] * n, greedy).tokens.tolist()
                if i:
                    times.append(time.perf_counter() - t0)
            out.append(sorted(times)[len(times) // 2])
        return out
    finally:
        seq.release()
