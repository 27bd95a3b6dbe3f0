"""specchat's inference engine: load a model, then generate with or without speculation.

    from engine import load_model, generate, SamplingParams, NgramProposer
    model = load_model("smollm2-135m")
    result = generate(model, ids, sampling=SamplingParams(), speculative=NgramProposer(k=4))
"""

from engine.network.config import ModelConfig
from engine.errors import EngineError
from engine.loading.loader import load_model
from engine.speculation.metrics import Metrics
from engine.speculation.proposers import DFlashProposer, DraftProposer, NgramProposer, Proposer
from engine.runtime.model import Model, random_model
from engine.runtime.sampling import SamplingParams
from engine.speculation.loop import Generation, Result, Step, generate, stream

__all__ = [
    "DFlashProposer", "DraftProposer", "EngineError", "Generation", "Metrics", "Model", "ModelConfig",
    "NgramProposer", "Proposer", "Result", "SamplingParams", "Step", "generate", "load_model", "random_model",
    "stream",
]
