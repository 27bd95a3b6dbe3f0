"""Prompt lookup: draft what followed the latest earlier occurrence of the context's last 3, 2 or 1
tokens (proposer.py)."""

from engine.speculation.proposers.spec import ProposerSpec, deferred

SPEC = ProposerSpec(
    name="ngram",
    label="n-gram",
    summary="prompt lookup: what followed the last 1-3 tokens earlier in the context (free, on the host)",
    make=deferred("engine.speculation.proposers.ngram.proposer", "make"),
    order=10,
)
