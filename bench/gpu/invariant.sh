#!/usr/bin/env bash
# One call on the lent GPU: the step kernels' CUDA tests (the batch-invariant mode's included),
# then the step bench of both shapes with and without the mode (random weights), so the two can
# be compared in one run. Extra arguments are passed to the step bench.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
OUT=${OUT:-bench/out}; mkdir -p "$OUT"
timeout 150 python3 -m pytest -q -p no:cacheprovider -p no:benchmark -n 8 tests/test_cuda_kernels.py 2>&1 | tail -4
timeout 120 python3 -m pytest -q -p no:cacheprovider -p no:benchmark tests/test_cuda_graphs.py -k batch_invariant \
  2>&1 | grep -v "Warn\|warn" | tail -4
for shape in qwen3-4b qwen2.5-1.5b; do
  for mode in "" --batch-invariant; do
    timeout 120 python3 -m specchat bench steps --random $shape --contexts 1024 --no-eager --no-transformers $mode \
      "$@" --json "$OUT/steps-$shape${mode:+-invariant}.json" 2>&1 | grep -v "Warn\|warn" | tail -12
  done
done
