#!/usr/bin/env bash
# On the GPU machine, after the chunks that `gpu-stage` made of the two Qwen2.5-Coder GGUFs (and
# the gguf / platformdirs wheels) sit in /root/stage. `setup` joins them, puts them where the
# packs live, converts them once (as `specchat pull` does), then runs the step bench on the real
# 1.5B weights (`setup quick`: not); `tests` runs the CUDA tests. `table PROMPT [bench options]` runs the
# results-table bench on one prompt (ratios stay within one run; `specchat bench --from-json` merges the
# prompts' JSON files afterwards).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-bench/out}
mkdir -p "$OUT"
export SPECCHAT_CACHE=/root/stage/cache
python3 -m pip install -q --no-index --no-deps --target /tmp/site /root/stage/whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:.
case "$1" in
setup)
  bash "$(dirname "$0")/session.sh" setup
  [ "${2:-}" = quick ] && exit 0  # weights only, no step bench
  timeout 240 python3 -m specchat bench steps --model qwen2.5-coder-1.5b --contexts 1024 8192 \
    --json "$OUT/steps-coder-1.5b.json" 2>&1 | grep -v "Warn\|warn" | tail -25
  ;;
tests)
  timeout 100 python3 -m pytest -q -p no:cacheprovider -p no:benchmark -n 8 tests/test_cuda_kernels.py 2>&1 | tail -3
  timeout 200 python3 -m pytest -q -p no:cacheprovider -p no:benchmark -n 4 tests/test_cuda_graphs.py \
    tests/test_dflash_cuda.py 2>&1 | grep -v "Warn\|warn" | tail -15
  ;;
table)
  timeout 500 python3 -m specchat bench --model qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b \
    --dflash random --prompts "$2" --k 1 2 4 7 15 --peer-k 4 15 --repeats 2 --warmup 1 --out "$OUT/$2" "${@:3}" 2>&1 \
    | tail -45
  ;;
esac
