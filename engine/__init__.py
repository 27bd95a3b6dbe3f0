"""specchat's inference engine: load a model, then generate with or without speculation.

    from engine import load_model, generate, SamplingParams, NgramProposer
    model = load_model("smollm2-135m")
    result = generate(model, ids, sampling=SamplingParams(), speculative=NgramProposer(k=4))
"""

from engine.batch import BatchDecoder, Finished, generate_batch
from engine.config import ModelConfig
from engine.errors import EngineError
from engine.loader import load_model
from engine.metrics import Metrics
from engine.proposers import DFlashProposer, DraftProposer, NgramProposer, Proposer
from engine.runner import Model, random_model
from engine.sampling import SamplingParams
from engine.speculative import Generation, Result, Step, generate, stream

__all__ = [
    "BatchDecoder", "DFlashProposer", "DraftProposer", "EngineError", "Finished", "Generation", "Metrics", "Model",
    "ModelConfig", "NgramProposer", "Proposer", "Result", "SamplingParams", "Step", "generate", "generate_batch",
    "load_model", "random_model", "stream",
]
