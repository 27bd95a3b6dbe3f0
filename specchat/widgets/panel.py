"""The speculation panel: what drafts now, what the last step did, and what it all cost."""

from __future__ import annotations

from collections import deque

from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from engine import MAX_K, Metrics, Step
from specchat.widgets.redraw import redraw

BARS = "▁▂▃▄▅▆▇█"
KIND_STYLES = {"bonus": "$text-primary", "correction": "$text-warning", "plain": "$text-muted"}
# who drafted a step, in the line of drafts asked per step (plain steps in the muted style)
PROPOSER_STYLES = {"n-gram": "$text-success", "draft": "$text-primary", "dflash": "$text-accent"}
HISTORY = 30  # steps the sparkline shows
# A draft model drafts at every step, so no plain step is timed unless asked for: say how.
NOT_TIMED = "speedup: no plain step timed yet;\nctrl+p to off for one reply times it"


class Stats:
    """Metrics of the reply being written and of the whole session, plus the cost of a plain step.

    The speedup compares decode speed with 1 / (mean time of a plain decode step), measured on
    this model in this session: plain replies and speculative steps that found no drafts both
    time one. Until one has been timed, there is no speedup to show.

    Beside the engine's decode rate it keeps the rate the user saw: tokens on the screen over
    the wall time since the message was sent (prefill, display and everything between steps)."""

    def __init__(self) -> None:
        self.session = Metrics()
        self.plain_steps = 0
        self.plain_s = 0.0
        self.session_seen_tokens = 0  # of finished replies
        self.session_seen_s = 0.0
        self.new_reply()

    def new_reply(self, started: float | None = None) -> None:
        self.reply = Metrics()
        self.history: deque[Step] = deque(maxlen=HISTORY)
        self.last: Step | None = None
        self.started = started  # when the message was sent (time.perf_counter)
        self.emitted = 0  # tokens of the reply, its first (from the prefill) included
        self.seen_s = 0.0  # from sending to the latest step on the screen

    def shown(self, at: float, final: bool = False) -> None:
        """The steps added so far are on the screen at `at`; `final`: the reply is complete."""
        if self.started is None:
            return
        self.seen_s = at - self.started
        if final:
            self.session_seen_tokens += self.emitted
            self.session_seen_s += self.seen_s

    @property
    def seen_rate(self) -> float:
        return self.emitted / self.seen_s if self.seen_s > 0 else 0.0

    @property
    def session_seen_rate(self) -> float:
        return self.session_seen_tokens / self.session_seen_s if self.session_seen_s > 0 else 0.0

    def add(self, step: Step) -> None:
        self.reply.add(step)
        self.session.add(step)
        self.emitted += len(step.tokens)
        if step.prefill or not (step.tokens or step.drafts):
            return
        self.history.append(step)
        self.last = step
        if not step.drafts:
            self.plain_steps += 1
            self.plain_s += step.verify_s

    @property
    def plain_step_s(self) -> float | None:
        return self.plain_s / self.plain_steps if self.plain_steps else None

    def speedup(self, m: Metrics) -> float | None:
        plain = self.plain_step_s
        if plain is None or not m.tokens_per_second:
            return None
        return m.tokens_per_second * plain


def rate(tokens_per_s: float) -> str:
    return f"{tokens_per_s:.1f}" if tokens_per_s else "—"


def row(label: str, reply: str, session: str) -> Content:
    return Content.assemble((f"{label:<12}", "$text-muted"), f"{reply:>9}{session:>10}\n")


def figures(stats: Stats) -> Content:
    r, s = stats.reply, stats.session

    def speed(m: Metrics) -> str:
        x = stats.speedup(m)
        return "—" if x is None else f"x{x:.2f}"

    def ms(seconds: float, steps: int) -> str:
        return f"{1000 * seconds / steps:.2f}" if steps else "—"

    plain = stats.plain_step_s
    basis = NOT_TIMED if plain is None else f"plain step {1000 * plain:7.2f} ms"
    return Content.assemble(
        Content.styled(f"{'':<12}{'reply':>9}{'session':>10}\n", "bold"),
        row("tokens/step", f"{r.mean_acceptance_length:.2f}", f"{s.mean_acceptance_length:.2f}"),
        row("acceptance", f"{100 * r.draft_acceptance_rate:.0f} %", f"{100 * s.draft_acceptance_rate:.0f} %"),
        row("decode tok/s", f"{r.tokens_per_second:.1f}", f"{s.tokens_per_second:.1f}"),
        row("seen tok/s", rate(stats.seen_rate), rate(stats.session_seen_rate)),
        row("speedup", speed(r), speed(s)),
        row("propose ms", ms(r.propose_s, r.steps), ms(s.propose_s, s.steps)),
        row("verify ms", ms(r.verify_s, r.steps), ms(s.verify_s, s.steps)),
        (basis, "$text-muted"),
    )


def auto_choice(step: Step) -> tuple[str, str] | None:
    """(what k or proposer "auto" chose for this step, why), a few words each; None for a step of
    a fixed k (only the policy's choices carry an expected gain)."""
    if step.gain is None:
        return None
    if step.proposer == "off":
        return "plain step", "drafts not worth it"
    if step.probe:
        return f"{step.proposer} k {step.k}", "a probe: pays again?"
    return f"{step.proposer} k {step.k}", f"x{step.gain:.2f} plain expected"


def last_step(step: Step | None) -> Content:
    if step is None:
        return Content.styled("last step   —", "$text-muted")
    pad = " " * 12
    if not step.drafts:
        why = ""
        if step.proposer != "off":  # a proposer was on: say why this step went without drafts
            why = f"\n{pad}{step.proposer} found no match" if step.k else f"\n{pad}no room to draft"
        what = ("plain decode" + why, KIND_STYLES["plain"])
    else:
        what = (
            f"{len(step.drafts)} drafted\n{pad}{step.accepted} accepted\n{pad}{step.kind}",
            KIND_STYLES[step.kind],
        )
    chosen = auto_choice(step)
    if chosen is None:
        return Content.assemble(("last step   ", "$text-muted"), what)
    # under "auto" plain and drafting steps alternate: the same height for both keeps the panel
    # from a layout of the whole screen at each change (redraw.py)
    text, style = what
    text += "\n" * (2 - text.count("\n"))
    choice, why = chosen
    return Content.assemble(("last step   ", "$text-muted"), (text, style),
                            ("\nauto chose  ", "$text-muted"), (choice, "bold"), (f"\n{pad}{why}", "$text-muted"))


def sparkline(steps: list[Step]) -> Content:
    """Accepted drafts per step, a bar each, coloured by how the step ended."""
    if not steps:
        return Content.styled("—", "$text-muted")
    top = max(max(s.k for s in steps), 1)
    return Content.assemble(
        *(
            (BARS[round(s.accepted / top * (len(BARS) - 1))], KIND_STYLES[s.kind if s.drafts else "plain"])
            for s in steps
        )
    )


def choices(steps: list[Step]) -> Content | None:
    """Drafts asked per step, a bar each (k of MAX_K) in the style of who drafted, plain steps low
    and muted, and under it the styles' key: what k and proposer "auto" chose step by step. None
    where no step of these was the policy's choice (a fixed k says as much in the panel's head)."""
    if not any(s.gain is not None for s in steps):
        return None
    bars = Content.assemble(*(
        (BARS[round(s.k / MAX_K * (len(BARS) - 1))] if s.drafts else BARS[0],
         PROPOSER_STYLES.get(s.proposer, KIND_STYLES["plain"]) if s.drafts else KIND_STYLES["plain"])
        for s in steps
    ))
    seen = {s.proposer for s in steps if s.drafts}
    key = [(f"{BARS[5]} {name}  ", style) for name, style in PROPOSER_STYLES.items() if name in seen]
    return bars + Content("\n") + Content.assemble(*key, (f"{BARS[0]} plain", KIND_STYLES["plain"]))


def histogram(m: Metrics, width: int = 18) -> Content:
    """Steps by number of accepted drafts."""
    if not m.histogram:
        return Content.styled("—", "$text-muted")
    most = max(m.histogram.values())
    lines = []
    for accepted in range(max(m.histogram) + 1):
        count = m.histogram.get(accepted, 0)
        bar = "█" * max(round(count / most * width), 1 if count else 0)
        lines.append(Content.assemble(f"{accepted:>2} ", (f"{bar:<{width}}", "$text-success"), f" {count}"))
    return Content("\n").join(lines)


class SpecPanel(VerticalScroll):
    """The right-hand panel. `show(...)` redraws it from the stats."""

    PARTS = ("proposer", "last-step", "figures", "sparkline", "choices", "histogram")

    def compose(self):
        # Kept by reference: a step that lands while the app closes updates them harmlessly.
        self.parts = {name: Static(id=name) for name in self.PARTS}
        self.choices_heading = Static("drafts asked per step · auto", classes="heading")
        yield self.parts["proposer"]
        yield self.parts["last-step"]
        yield self.parts["figures"]
        yield Static("accepted per step · reply", classes="heading")
        yield self.parts["sparkline"]
        yield self.choices_heading  # shown while "auto" chooses: what it chose, step by step
        yield self.parts["choices"]
        yield Static("accepted per step · session", classes="heading")
        yield self.parts["histogram"]

    def show(self, stats: Stats, proposer: str, k: int, loading: str = "") -> None:
        drafting = Content.assemble(("proposer    ", "$text-muted"), (proposer, "bold"))
        if proposer != "off":
            drafting += Content.assemble("  ", ("k ", "$text-muted"), (str(k), "bold"))
        if loading:
            drafting += Content.styled(f"\n{loading}", "$text-warning")
        redraw(self.parts["proposer"], drafting)
        redraw(self.parts["last-step"], last_step(stats.last))
        redraw(self.parts["figures"], figures(stats))
        history = list(stats.history)
        redraw(self.parts["sparkline"], sparkline(history))
        chosen = choices(history)
        if self.choices_heading.display != (chosen is not None):  # a change of display lays out the screen
            self.choices_heading.display = self.parts["choices"].display = chosen is not None
        if chosen is not None:
            redraw(self.parts["choices"], chosen)
        redraw(self.parts["histogram"], histogram(stats.session))
