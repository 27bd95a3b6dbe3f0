#!/usr/bin/env bash
# One call on the lent GPU: the CUDA tests, then the step bench on the two shapes.
# Usage there: bash bench/gpu/run_steps.sh  (figures and logs land in $OUT)
export PYTHONUNBUFFERED=1
OUT=${OUT:-bench/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)"
timeout 150 python3 -m pytest -q -p no:cacheprovider -n 8 -p no:benchmark tests/test_cuda_kernels.py 2>&1 | tee "$OUT/kernels.log" | tail -15
timeout 200 python3 -m pytest -q -p no:cacheprovider -p no:benchmark tests/test_cuda_graphs.py 2>&1 | tee "$OUT/graphs.log" | tail -25
timeout 240 python3 -m specchat bench steps --random qwen3-4b --json "$OUT/steps-qwen3-4b.json" 2>&1 | tee "$OUT/steps.log"
PYTHONPATH=. timeout 60 python3 bench/gpu/attn_sweep.py 2>&1 | tee "$OUT/attn_sweep.log"
