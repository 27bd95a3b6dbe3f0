"""The race: the last prompt again, through plain decoding and every proposer ready in the chat,
with the same sampling and seed, one after another, so their figures can be set side by side.

Plain decoding runs first: it is the reference for speed (speedup) and for the text (with greedy
decoding, or sampling with the engine's counter-keyed noise, every proposer must write the very
same text; "same text as plain" checks that on your own prompt).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from engine import EngineError, Metrics, SamplingParams
from specchat.feed import StepFeed
from specchat.stats_file import write_pair


@dataclass
class RaceRow:
    name: str  # "off" for plain decoding, else the proposer's chat name
    k: int | str
    tokens: list[int] = field(default_factory=list)
    pieces: list[tuple[str, str]] = field(default_factory=list)  # (text, origin) as the reply shows them
    metrics: Metrics = field(default_factory=Metrics)
    finished: str = ""
    error: str = ""

    @property
    def text(self) -> str:
        return "".join(text for text, kind in self.pieces if kind != "refused")


@dataclass
class Race:
    rows: list[RaceRow]
    sampling: SamplingParams

    @property
    def plain(self) -> RaceRow | None:
        return next((r for r in self.rows if r.name == "off" and not r.error), None)

    def speedup(self, row: RaceRow) -> float | None:
        plain = self.plain
        if plain is None or not plain.metrics.tokens_per_second or row.error:
            return None
        return row.metrics.tokens_per_second / plain.metrics.tokens_per_second

    def same_as_plain(self, row: RaceRow) -> bool | None:
        plain = self.plain
        if plain is None or row.error or row.finished == "cancelled" or plain.finished == "cancelled":
            return None
        return row.tokens == plain.tokens

    def figures(self) -> list[dict]:
        """One dict per row: the table's columns, for the screen and for export."""
        out = []
        for row in self.rows:
            m = row.metrics
            out.append({
                "proposer": row.name, "k": row.k, "tokens": len(row.tokens), "steps": m.steps,
                "tokens_per_step": m.mean_acceptance_length, "draft_acceptance_rate": m.draft_acceptance_rate,
                "tokens_per_second": m.tokens_per_second, "speedup": self.speedup(row),
                "same_text_as_plain": self.same_as_plain(row), "finished": row.finished, "error": row.error,
                "text": row.text,
            })
        return out


def run_race(session, ids: list[int], sampling: SamplingParams, entrants: list[tuple[str, int | str]],
             cancelled: threading.Event, progress: Callable[[str], None] = lambda text: None) -> Race:
    """Run `ids` through each (proposer name, k) in turn ("off" first); stops early when cancelled.
    A proposer that fails is a row with its error, and the race goes on."""
    race = Race([], sampling)
    for name, k in entrants:
        if cancelled.is_set():
            break
        progress(f"racing {name}" if name != "off" else "racing plain decoding")
        row = RaceRow(name, k)
        race.rows.append(row)
        try:
            proposer = session.proposer(name, k) if name != "off" else None
            if proposer is not None:  # k auto's step costs timed (once) before its row, not in it
                proposer.warm_up_costs(session.model)
            gen = session.stream(ids, sampling, proposer)
            feed = StepFeed(0, session.detokenizer())  # the chat's own road from steps to styled text
            for step in gen:
                if cancelled.is_set():
                    gen.cancel()
                feed.put(step)
                row.pieces += [piece for shown in feed.take() for piece in shown.pieces]
                row.finished = step.finished or row.finished
            row.tokens, row.metrics = list(gen.tokens), gen.metrics
        except EngineError as err:
            row.error = str(err)
    return race


def export_race(path, race: Race) -> tuple:
    """The race's table as PATH.json (the replies' text included) and PATH.csv (one row each)."""
    table = race.figures()
    columns = [c for c in table[0] if c != "text"] if table else []
    rows = [tuple(columns), *(tuple(r[c] for c in columns) for r in table)]
    return write_pair(path, {"sampling": asdict(race.sampling), "rows": table}, rows)
