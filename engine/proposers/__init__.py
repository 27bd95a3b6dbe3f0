from engine.proposers.base import MAX_K, Proposal, Proposer
from engine.proposers.draft import DraftProposer
from engine.proposers.ngram import NgramProposer

__all__ = ["MAX_K", "DraftProposer", "NgramProposer", "Proposal", "Proposer"]
