#!/usr/bin/env bash
# One call on the lent GPU: the CUDA tests, then the step bench on two shapes.
# Usage there: bash bench/gpu/run_steps.sh  (figures and logs land in $OUT)
export PYTHONUNBUFFERED=1
OUT=${OUT:-bench/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)"
timeout 150 python3 -m pytest -q -p no:cacheprovider -n 8 -p no:benchmark tests/test_cuda_kernels.py 2>&1 | tee "$OUT/kernels.log" | tail -5
timeout 200 python3 -m pytest -q -p no:cacheprovider -p no:benchmark tests/test_cuda_graphs.py 2>&1 | tee "$OUT/graphs.log" | tail -25
timeout 240 python3 -m specchat bench steps --random qwen3-4b --json "$OUT/steps-qwen3-4b.json" 2>&1 | tee "$OUT/steps.log"
timeout 120 python3 -m specchat bench steps --random qwen2.5-1.5b --contexts 1024 --no-eager --no-transformers \
  --json "$OUT/steps-qwen2.5-1.5b.json" 2>&1 | tee "$OUT/steps-1.5b.log"
