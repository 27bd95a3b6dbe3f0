"""A smaller model with the target's vocabulary drafts k tokens on its own paged cache (proposer.py)."""

from engine.speculation.proposers.spec import Need, ProposerSpec, deferred

DRAFTING = "engine.speculation.proposers.draft.proposer"

SPEC = ProposerSpec(
    name="draft",
    label="draft",
    summary="a smaller model with the target's vocabulary decodes k drafts (k small decode steps)",
    need=Need("draft", "MODEL", "draft model with the target's vocabulary", "no --draft model given"),
    load=deferred(DRAFTING, "load_draft"),
    make=deferred(DRAFTING, "make"),
    describe=lambda draft: f"draft {draft.name}",
    order=20,
)
