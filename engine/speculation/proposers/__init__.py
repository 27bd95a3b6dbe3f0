from engine.speculation.proposers.base import MAX_K, Proposal, Proposer
from engine.speculation.proposers.dflash.proposer import DFlashProposer
from engine.speculation.proposers.draft import DraftProposer
from engine.speculation.proposers.ngram import NgramProposer

__all__ = ["MAX_K", "DFlashProposer", "DraftProposer", "NgramProposer", "Proposal", "Proposer"]
