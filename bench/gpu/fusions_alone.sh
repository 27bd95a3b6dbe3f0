#!/usr/bin/env bash
# Each of the four decode fusions alone (engine/kernels/overlap.py), then the batched decode
# step's attention at generate's context lengths: random weights, no pack needed, so it can run
# in the background while a pack is staged (nothing else may use the GPU meanwhile).
#   bash bench/gpu/session.sh bg alone "bash bench/gpu/fusions_alone.sh"
set -uo pipefail
SHAPES="${SHAPES:-qwen2.5-0.5b qwen2.5-1.5b qwen3-4b}" \
  SETTINGS="1,1,0,0,0,0,0 1,1,0,1,0,0,0 1,1,0,0,1,0,0 1,1,0,0,0,1,0 1,1,0,0,0,0,1" \
  bash bench/gpu/session.sh pdl
source bench/gpu/common.sh
timeout 300 python3 bench/gpu/batch_attn_sweep.py 2>&1 | grep -v "Warn\|warn" | tee "$OUT/batch-attn-sweep.txt" | grep "best"
