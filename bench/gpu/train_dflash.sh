#!/usr/bin/env bash
# Train a DFlash drafter for the Coder-1.5B on the GPU machine, one call per subcommand (each
# call stays under ten minutes; the training resumes from its checkpoint across calls).
# Assumes the pack is in SPECCHAT_CACHE (bench/gpu/session.sh setup). Files come back under $OUT;
# carry the data back in with the tree: copy $OUT/dflash-data to bench/dflash-data before `train`.
#   data-prompts           4000 training prompts and 64 held-out ones, from code installed there
#   data-greedy            the target's greedy replies to them          (specchat generate)
#   data-sampled           its sampled replies (T 0.7, top-p 0.8, top-k 20)
#   train LAYERS MINUTES   train (total budget MINUTES <= 20); rerun the same line to resume
#   eval DIR...            tau at k = 15: edit, explain, held-out; beside a random drafter
#   bench DIR              the bench rows with the drafter (edit, explain; greedy; best k)
set -uo pipefail
export PYTHONUNBUFFERED=1 SPECCHAT_CACHE=${SPECCHAT_CACHE:-/root/stage/cache}
OUT=${OUT:-bench/out}
mkdir -p "$OUT" && OUT=$(realpath "$OUT")
if [ -d /root/stage/whl ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site /root/stage/whl/*.whl 2>/dev/null
fi
export PYTHONPATH=/tmp/site:.
name=qwen2.5-coder-1.5b
DATA=bench/dflash-data
case "$1" in
data-prompts)
  mkdir -p "$OUT/dflash-data"
  python3 -m specchat dflash-prompts --out "$OUT/dflash-data/prompts.jsonl" --count 4000
  python3 -m specchat dflash-prompts --out "$OUT/dflash-data/eval.jsonl" --count 64 --held-out
  ;;
data-greedy)
  mkdir -p "$OUT/dflash-data" && cp "$DATA"/*.jsonl "$OUT/dflash-data/" 2>/dev/null
  timeout 580 python3 -m specchat generate --model $name --prompts "$OUT/dflash-data/prompts.jsonl" \
    --out "$OUT/dflash-data/greedy.jsonl" --batch-size 256 --max-tokens 768 --temperature 0 2>&1 | tail -2
  ;;
data-sampled)
  mkdir -p "$OUT/dflash-data" && cp "$DATA"/*.jsonl "$OUT/dflash-data/" 2>/dev/null
  timeout 580 python3 -m specchat generate --model $name --prompts "$OUT/dflash-data/prompts.jsonl" \
    --out "$OUT/dflash-data/sampled.jsonl" --batch-size 256 --max-tokens 768 --temperature 0.7 \
    --top-p 0.8 --top-k 20 --seed 1 2>&1 | tail -2
  ;;
train)
  layers=${2:-5}; minutes=${3:-20}
  dir=$SPECCHAT_CACHE/$name/dflash-l$layers
  resume=""; [ -f "$dir/training/checkpoint.pt" ] && resume="--resume"
  timeout 590 python3 -m specchat train-dflash --model $name --out "$dir" --layers "$layers" \
    --prompts $DATA/prompts.jsonl --replies $DATA/greedy.jsonl $DATA/sampled.jsonl \
    --minutes "$minutes" --stop-after 8.5 --checkpoint-minutes 2 --batch-size 4 --anchors 256 $resume 2>&1 \
    | tr '\r' '\n' | grep -v "^ *$" | tail -3
  cp "$dir/training/history.json" "$OUT/history-l$layers.json"; cp "$dir/data-card.json" "$dir/DATA.md" "$OUT/"
  ;;
eval)
  shift
  timeout 590 python3 bench/gpu/dflash_tau.py $name "$@" --held-out $DATA/eval.jsonl --json "$OUT/tau.json"
  ;;
bench)
  for prompt in edit explain; do
    timeout 280 python3 -m specchat bench --model $name --dflash "$2" --prompts $prompt --k 4 7 15 \
      --repeats 2 --warmup 1 --no-peers --out "$OUT/bench-dflash-$prompt" 2>&1 | tail -12
  done
  ;;
esac
