"""specchat's inference engine: load a model, then generate with or without speculation.

    from engine import load_model, generate, SamplingParams, NgramProposer
    model = load_model("smollm2-135m")
    result = generate(model, ids, sampling=SamplingParams(), speculative=NgramProposer(k=4))
"""

from engine.config import ModelConfig
from engine.errors import EngineError
from engine.loader import load_model
from engine.metrics import Metrics
from engine.proposers import DFlashProposer, DraftProposer, NgramProposer, Proposer
from engine.proposers.draft import check_same_vocabulary
from engine.runner import Model, random_model
from engine.sampling import SamplingParams
from engine.speculative import Generation, Result, Step, generate, stream

__all__ = [
    "DFlashProposer", "DraftProposer", "EngineError", "Generation", "Metrics", "Model", "ModelConfig",
    "NgramProposer", "Proposer", "Result", "SamplingParams", "Step", "check_same_vocabulary", "generate", "load_model",
    "random_model", "stream",
]
