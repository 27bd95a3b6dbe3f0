"""Where an eager prefill's host time goes (random weights of the Coder-1.5B's shape): the torch
profiler's CPU ops over a prompt of a new length and a recompute of 128 tokens' states.

    PYTHONPATH=. python bench/gpu/prefill_host.py
"""

import torch

from engine import SamplingParams, random_model
from engine.network.config import preset
from engine.speculation.context_states import context_states

GREEDY = SamplingParams(temperature=0.0)

model = random_model(preset("qwen2.5-1.5b"), device="cuda", dtype=torch.bfloat16, max_context=4096)
model.warm_up(GREEDY)
seq = model.new_sequence()
ids = [(37 * i + 11) % 30000 + 100 for i in range(1600)]
model.step(seq, ids[:-1], GREEDY, last_only=True)
seq.release()


def prefill() -> None:
    seq = model.new_sequence()
    model.step(seq, ids[:1049], GREEDY, last_only=True)
    seq.release()


prefill()
torch.cuda.synchronize()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    prefill()
    torch.cuda.synchronize()
print("prefill of 1049 tokens")
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=22, max_name_column_width=60))
seq = model.new_sequence()
model.step(seq, ids, GREEDY, last_only=True)
context_states(model, seq, ids[-129:-1], 1600 - 129, (1, 7, 13))
torch.cuda.synchronize()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    context_states(model, seq, ids[-129:-1], 1600 - 129, (1, 7, 13))
    torch.cuda.synchronize()
print("states of 128 tokens computed again")
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=22, max_name_column_width=60))
