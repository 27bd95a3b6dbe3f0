from engine.proposers.base import MAX_K, Proposal, Proposer
from engine.proposers.dflash import DFlashProposer
from engine.proposers.draft import DraftProposer
from engine.proposers.ngram import NgramProposer

__all__ = ["MAX_K", "DFlashProposer", "DraftProposer", "NgramProposer", "Proposal", "Proposer"]
