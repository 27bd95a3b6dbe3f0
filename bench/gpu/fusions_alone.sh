#!/usr/bin/env bash
# What needs no pack, for the background of a staging (nothing else may use the GPU meanwhile):
# each of the four decode fusions alone (engine/kernels/overlap.py) on random-weight shapes (and
# the default without dependent launch, whose profile splits a step by kind without the waits), the
# batched decode step's attention at generate's context lengths, and a DFlash training step on
# the 1.5B shape's random weights (the staged prompts and replies: dflash.sh stage first).
#   bash bench/gpu/session.sh bg alone "bash bench/gpu/fusions_alone.sh"
set -uo pipefail
SHAPES="${SHAPES:-qwen2.5-0.5b qwen2.5-1.5b qwen3-4b}" \
  SETTINGS="1,1,0,0,0,0,0 1,1,0,1,0,0,0 1,1,0,0,1,0,0 1,1,0,0,0,1,0 1,1,0,0,0,0,1 0,1,0,0,0,0,0" \
  bash bench/gpu/session.sh pdl
source bench/gpu/common.sh
timeout 300 python3 bench/gpu/batch_attn_sweep.py --batch 256 2>&1 | grep -v "Warn\|warn" | tee "$OUT/batch-attn-sweep.txt" | grep "best"
if [ -f /root/stage/data/greedy.jsonl ]; then
  SHAPE=qwen2.5-1.5b BATCHES=8 bash bench/gpu/dflash.sh profile 2 | tee "$OUT/train-step-profile.txt" | head -12
fi
