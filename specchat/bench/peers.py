"""transformers' own `generate` on the same model, prompts, device and dtype: the peer rows.

Methods, in our vocabulary: plain; n-gram = prompt lookup (`prompt_lookup_num_tokens=k`, matching
up to as many tokens as ours does); draft = `assistant_model` with exactly k drafts per step (constant
schedule, no confidence stop); draft-heuristic = the assistant with transformers' default
schedule, starting at k (+2 after a fully accepted step, -1 otherwise, and its confidence stop).

Decode time is the generate call's wall time less the prefill, measured the same way (a one-token
generate of the target, and of the assistant for its rows: it reads the prompt in the first step),
so it is comparable with our decode time, which also leaves both prefills out.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import torch

from engine import PACKS, EngineError, NgramProposer, ensure_pack
from specchat.bench.runs import TRANSFORMERS, Case, Job, Run

NGRAM_SIZE = NgramProposer().max_n  # our prompt lookup matches the longest suffix of up to this many tokens
HEURISTIC_CONFIDENCE = 0.4  # transformers' default assistant_confidence_threshold


def hf_source(name_or_path: str) -> tuple[str, dict]:
    """What AutoModelForCausalLM.from_pretrained reads for a model name of ours: a pack's
    converted directory, a GGUF file (gguf_file=), an HF directory or a hub id."""
    if name_or_path in PACKS:
        return str(ensure_pack(name_or_path)), {}
    path = Path(os.path.expanduser(name_or_path))
    if path.is_file():
        return str(path.parent), {"gguf_file": path.name}
    return name_or_path, {}


def load_hf_model(name_or_path: str, device, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM

    source, kw = hf_source(name_or_path)
    try:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **kw)
    except Exception as err:  # noqa: BLE001 - any reason transformers refuses it: one line
        raise EngineError(f"transformers cannot load {name_or_path}: {str(err).splitlines()[0]}") from None
    return model.to(device).eval()


class TransformersPeer:
    """The target (and the draft, when given) loaded by transformers, ready to time generate."""

    def __init__(
        self,
        target: str,
        device,
        dtype: torch.dtype,
        stop_ids: list[int],
        draft: str | None = None,
        repeats: int = 1,
        models=None,
    ):
        from transformers.utils import logging

        logging.set_verbosity_error()  # generate's per-call advice would bury the progress bar
        logging.disable_progress_bar()
        self.device = torch.device(device)
        self.stop_ids = list(stop_ids)
        self.repeats = repeats
        if models is not None:  # already loaded (tests)
            self.model, self.assistant = models
        else:
            self.model = load_hf_model(target, device, dtype)
            self.assistant = load_hf_model(draft, device, dtype) if draft else None
        self.prefills: dict[tuple[str, str, str], float] = {}

    def jobs(self, cases: list[Case], ks: list[int]) -> list[Job]:
        out = []
        for case in cases:
            exact = case.sampling.greedy  # only argmax matching gives plain's text back
            out.append(self.job(case, "plain", 0, "transformers plain", True))
            out += [self.job(case, "ngram", k, "transformers prompt lookup", exact) for k in ks]
            if self.assistant is not None:
                out += [self.job(case, "draft", k, "transformers assistant, constant k", exact) for k in ks]
                out += [
                    self.job(case, "draft-heuristic", k, "transformers assistant, heuristic k", exact)
                    for k in ks
                ]
        return out

    def job(self, case: Case, method: str, k: int, label: str, deterministic: bool) -> Job:
        return Job(TRANSFORMERS, case, method, k, label, deterministic, lambda: self.timed(case, method, k))

    def options(self, case: Case, method: str, k: int) -> dict:
        s = case.sampling
        kw = {
            "max_new_tokens": s.max_tokens,
            "min_new_tokens": 0,
            "eos_token_id": self.stop_ids or None,
            "pad_token_id": self.stop_ids[0] if self.stop_ids else 0,
            "repetition_penalty": 1.0,
        }
        if s.greedy:
            kw.update(do_sample=False, temperature=None, top_k=None, top_p=None)
        else:
            kw.update(do_sample=True, temperature=s.temperature, top_k=s.top_k or None, top_p=s.top_p)
        if method == "ngram":
            kw.update(prompt_lookup_num_tokens=k, max_matching_ngram_size=NGRAM_SIZE)
        elif method.startswith("draft"):
            # transformers reads these from the assistant's own generation config (and keeps what
            # its schedule changed there): set them before every call so repeats start the same.
            cfg = self.assistant.generation_config
            cfg.num_assistant_tokens = k
            heuristic = method == "draft-heuristic"
            cfg.num_assistant_tokens_schedule = "heuristic" if heuristic else "constant"
            cfg.assistant_confidence_threshold = HEURISTIC_CONFIDENCE if heuristic else 0.0
            kw["assistant_model"] = self.assistant
        return kw

    def generate(self, case: Case, kw: dict, model=None) -> tuple[list[int], float]:
        ids = torch.tensor([case.ids], device=self.device)
        if not case.sampling.greedy:
            torch.manual_seed(case.sampling.seed)  # the same draws in every repeat
        self.sync()
        start = time.perf_counter()
        with torch.inference_mode():
            out = (model or self.model).generate(ids, attention_mask=torch.ones_like(ids), **kw)
        self.sync()
        return out[0, ids.shape[1] :].tolist(), time.perf_counter() - start

    def timed(self, case: Case, method: str, k: int) -> Run:
        prefill_s = self.prefill_s(case, "target")
        draft_prefill_s = self.prefill_s(case, "assistant") if method.startswith("draft") else 0.0
        tokens, total_s = self.generate(case, self.options(case, method, k))
        return Run(tokens, total_s - prefill_s - draft_prefill_s, prefill_s, None, draft_prefill_s)

    def prefill_s(self, case: Case, which: str) -> float:
        """Median time of a one-token generate of the target or the assistant: the prompt's
        forward pass and one sample."""
        key = (which, case.prompt.name, case.sampling_name)
        if key not in self.prefills:
            model = self.model if which == "target" else self.assistant
            kw = {**self.options(case, "plain", 0), "max_new_tokens": 1}
            times = [self.generate(case, kw, model)[1] for _ in range(self.repeats + 1)][1:]
            self.prefills[key] = statistics.median(times)
        return self.prefills[key]

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
