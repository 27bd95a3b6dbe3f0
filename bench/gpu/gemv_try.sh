# One call on the lent GPU: the kernel and graph tests, the linears' launch sweep, the step bench.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
OUT=${OUT:-bench/out}; mkdir -p "$OUT"
timeout 150 python3 -m pytest -q -p no:cacheprovider -p no:benchmark -n 8 tests/test_cuda_kernels.py 2>&1 | grep -v Warn | tail -15
timeout 200 python3 -m pytest -q -p no:cacheprovider -p no:benchmark -n 4 tests/test_cuda_graphs.py 2>&1 | grep -v Warn | tail -15
timeout 150 python3 bench/gpu/gemv_sweep.py qwen2.5-1.5b qwen3-4b 2>&1 | tee $OUT/sweep.log | grep -v "^  "
grep "^  " $OUT/sweep.log | head -5
for shape in qwen2.5-1.5b qwen3-4b; do
timeout 100 python3 -m specchat bench steps --random $shape --contexts 1024 --no-eager --no-transformers --repeats 30 \
  --json $OUT/steps-$shape.json 2>&1 | grep -v "Warn\|warn"
done
