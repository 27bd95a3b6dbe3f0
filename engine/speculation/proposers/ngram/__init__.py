"""Prompt lookup: draft what followed the latest earlier occurrence of the context's longest suffix
seen before, up to 8 tokens (proposer.py)."""

from engine.speculation.proposers.spec import ProposerSpec, deferred

SPEC = ProposerSpec(
    name="ngram",
    label="n-gram",
    summary="prompt lookup: what followed the last 1-8 tokens earlier in the context (free, on the host)",
    make=deferred("engine.speculation.proposers.ngram.proposer", "make"),
    order=10,
)
