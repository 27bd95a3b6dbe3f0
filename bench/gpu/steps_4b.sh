#!/usr/bin/env bash
# One call on the lent GPU: the step bench of the Qwen3-4B shape (random weights), with the
# attention sweep of the 1.5B shape and the linears' sweep of the 0.5B draft's shapes.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
OUT=${OUT:-bench/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
python3 -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)"
timeout 60 python3 bench/gpu/attn_sweep.py qwen2.5-1.5b 2>&1 | tee "$OUT/attn-sweep-1.5b.txt"
timeout 60 python3 bench/gpu/gemv_sweep.py qwen2.5-0.5b 2>&1 | grep -v "^  " | tee "$OUT/gemv-sweep-0.5b.txt"
timeout 300 python3 -m specchat bench steps --random qwen3-4b --json "$OUT/steps-qwen3-4b.json" 2>&1 \
  | grep -v "Warn\|warn" | tee "$OUT/steps-qwen3-4b.log"
