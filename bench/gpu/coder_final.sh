#!/usr/bin/env bash
# On the GPU, after stage_coder.sh's chunks are in /root/stage and joined there (gpu-stage prints
# the join command; run it first in the same call): the step bench on the real 1.5B weights, then
# plain vs speculative vs transformers' generate on the edit prompt (the results table's bench).
export PYTHONUNBUFFERED=1
OUT=${OUT:-bench/out}
python3 -m pip install -q --no-index --no-deps --target /tmp/site /root/stage/whl/*.whl && export PYTHONPATH=/tmp/site:.
m=/root/stage/qwen2.5-coder-1.5b.gguf
d=/root/stage/qwen2.5-coder-0.5b.gguf
timeout 200 python3 -m specchat bench steps --model $m --contexts 1024 --no-eager --json "$OUT/steps-coder-1.5b.json"
timeout 300 python3 -m specchat bench --model $m --draft $d --prompts edit --greedy-only --max-new-tokens 128 \
  --out "$OUT/coder-bench" 2>&1 | tail -30
