"""Prefill and decode speed of SmolLM2-135M on this CPU, one thread, the bench's edit prompt.

Usage: python bench/cpu/step_speed.py   (prints the prompt length, prefill seconds, decode ms per
token and the first tokens, so two versions of the engine can be compared on the same reply)
"""

import time

import torch

from engine import SamplingParams, generate, load_model
from specchat.bench.prompts import load_prompts

torch.set_num_threads(1)
model = load_model("smollm2-135m", device="cpu")
ids = model.encode_chat([{"role": "user", "content": load_prompts(["edit"])[0].text}])
start = time.perf_counter()
result = generate(model, ids, SamplingParams(max_tokens=24))
steps = result.steps
decode_ms = sum(s.verify_s for s in steps[1:]) / (len(steps) - 1) * 1e3
print(f"{len(ids)} prompt tokens; prefill {steps[0].verify_s:.2f} s; decode {decode_ms:.1f} ms/token; "
      f"first tokens {result.tokens[:8]}")
