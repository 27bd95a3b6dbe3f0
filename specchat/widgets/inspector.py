"""The step inspector: the step behind one token of a reply, with the numbers that decided it.

The probabilities are the verify step's own (engine Inspection), kept only for steps run while
the inspector was on; for other steps the panel shows what the Step itself records.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.content import Content
from textual.widgets import Static

from engine import Step

KEPT, REFUSED, UNTESTED = ("kept", "$text-success"), ("refused", "$text-error"), ("not tested", "$text-muted")
# what keeping the numbers costs: a few floats per position, one host copy per step
COST = "inspector on: reading these took {ms} after the step's clock (plain runs go one step at a time)"


def token_text(decode: Callable[[list[int]], str], token: int) -> str:
    return repr(decode([token]))


def ms(seconds: float) -> str:
    return f"{1000 * seconds:.2f} ms"


def verdict(i: int, step: Step) -> tuple[str, str]:
    if i < step.accepted:
        return KEPT
    return REFUSED if i == step.accepted else UNTESTED


def auto_why(step: Step) -> str:
    """Why k or proposer "auto" chose this step ("" for a step of a fixed k): the policy weighs
    each proposer's expected tokens a step against the step's cost, both measured as the reply
    goes, and a proposer that sat out is now and then given a step to show it pays again."""
    if step.gain is None:
        return ""
    read = f" ({step.reading}: its pass for this step, drafted ahead, said so)" if step.reading else ""
    if step.proposer == "off":
        return "auto chose a plain step: no proposer's drafts were expected to beat one" + read
    if step.probe:
        return (f"auto chose {step.proposer} with k = {step.k} as a probe: it had sat out, and this step asks "
                "whether its drafts land again")
    return (f"auto chose {step.proposer} with k = {step.k}: expected x{step.gain:.2f} the tokens a second "
            "of plain steps, the best of its options" + read)


def step_lines(step: Step, piece: str, decode: Callable[[list[int]], str], plain_step_s: float | None) -> list:
    """The panel's lines, each a (text, style) pair or a plain string."""
    lines: list = [(f"token {piece!r}", "bold"),
                   f"step at position {step.position}: {step.proposer}, k = {step.k}, {step.kind}"]
    cost = f"drafting {ms(step.propose_s)} + verify {ms(step.verify_s)}"
    if plain_step_s is not None:
        cost += f"  (a plain step: {ms(plain_step_s)})"
    lines.append(cost)
    why = auto_why(step)
    if why:
        lines.append((why, "italic"))
    view = step.inspection
    for i, draft in enumerate(step.drafts):
        word, style = verdict(i, step)
        line = f"  d{i + 1} {token_text(decode, draft)} {word}"
        if view is not None:
            check = view.drafts[i]
            line += f"  p {check.p:.4f}"
            if check.q is not None:
                line += f"  q {check.q:.4f}  min(1,p/q) {check.ratio:.4f}  u {check.u:.4f}"
        lines.append((line, style))
    if view is None:
        lines.append(("no probabilities: the inspector was off when this step ran", "$text-muted"))
        return lines
    lines.append("the model's own token after each prefix:")
    for i, (token, p) in enumerate(zip(view.model_tokens, view.model_p)):
        lines.append(f"  +{i} {token_text(decode, token)}  p {p:.4f}")
    where = "the rejection point" if view.decided_at < len(step.drafts) else "the last position"
    lines.append(f"top {len(view.top)} at {where}:")
    lines += [f"  {token_text(decode, t)}  {p:.4f}" for t, p in view.top]
    lines.append((COST.format(ms=ms(view.read_s)), "$text-muted italic"))
    return lines


class StepInspector(Static):
    """Docked under the chat while the inspector is on."""

    def show_step(self, step: Step | None, piece: str, decode, plain_step_s: float | None) -> None:
        if step is None:
            self.update(Content.styled("no token under the cursor: alt+← / alt+→ or click a token", "$text-muted"))
            return
        parts = []
        for line in step_lines(step, piece, decode, plain_step_s):
            parts.append(Content.styled(*line) if isinstance(line, tuple) else Content(line))
        self.update(Content("\n").join(parts))
