#!/usr/bin/env bash
# A DFlash drafter for the Coder-1.5B, trained and measured on one warm GPU machine (weights
# never come back: data, training, evaluation and bench run in calls back to back). Assumes the
# pack is in SPECCHAT_CACHE (bench/gpu/session.sh setup) and the prompts, made on the machine the
# code is read from, carried in bench/dflash-data:
#   specchat dflash-prompts --out bench/dflash-data/prompts.jsonl --count 4000
#   specchat dflash-prompts --out bench/dflash-data/eval.jsonl --count 64 --held-out
# One subcommand per call:
#   stage                  the carried prompts, and any carried replies (*.jsonl.gz; short/: an earlier
#                          prompt set with its replies, ids renamed short-N) into /root/stage/data, with
#                          earlier runs' history-*.json (their curves join eval's chart)
#   data SECONDS           the target's greedy, then sampled, replies (T 0.7, top-p 0.8, top-k 20),
#                          each for at most SECONDS; kept in /root/stage/data, gzipped copies to $OUT
#                          (keep them in bench/dflash-data: a later machine takes them from there)
#   profile [LAYERS]       where a training step's time goes (2 layers unless LAYERS; batch 8, 16, 32,
#                          or BATCHES="16 32"; the largest CUDA kernels of batch 16), before training;
#                          SHAPE=qwen2.5-1.5b: that shape's random weights, no pack needed (while staging)
#   train LAYERS MINUTES [BATCH] [LR]   train a LAYERS-layer drafter for MINUTES, BATCH samples a
#                          step (default 8) at peak learning rate LR (default 6e-4), started from the target's
#                          last layers (EXTRA=--no-start-from-target: random); rerun the line to resume
#                          (TRAIN_TIMEOUT: seconds, default 595; longer for a run in `session.sh bg`).
#                          Both prompt sets' replies when short/ was staged (NO_SHORT=1: the new set only).
#                          TAG=-x names the drafter dflash-lLAYERS-x (runs to compare side by side), EXTRA
#                          passes more train-dflash options (EXTRA=--standardize-features, EXTRA="--distill 1")
#   eval                   tau at k = 15 of every drafter trained here, beside a random one; the
#                          loss/tau curves as a PNG
#   bench LAYERS           the bench rows (plain, n-gram and DFlash at k 2 3 4 8 15 and auto, greedy and
#                          sampled) with it
#   exact LAYERS           float32 target and drafter: DFlash's replies against plain decoding, token for token
#   costs LAYERS           where a DFlash step's time goes: host against device for the drafter's pass and
#                          the verify step with and without states (bench/gpu/dflash_costs.py)
set -uo pipefail
source bench/gpu/common.sh
case "$1" in profile|bench|costs) quiet_gpu || exit 3;; esac
name=qwen2.5-coder-1.5b
DATA=${DATA:-/root/stage/data}
drafter() { echo "$SPECCHAT_CACHE/$name/dflash-l$1${TAG:-}"; }
case "$1" in
stage)
  mkdir -p $DATA && cp bench/dflash-data/*.jsonl $DATA/
  for f in greedy sampled; do
    [ -f bench/dflash-data/$f.jsonl.gz ] && gunzip -c bench/dflash-data/$f.jsonl.gz > $DATA/$f.jsonl
  done
  if [ -d bench/dflash-data/short ]; then  # two prompt sets number their ids alike
    sed 's/"id": "train-/"id": "short-/' bench/dflash-data/short/prompts.jsonl > $DATA/short-prompts.jsonl
    for f in greedy sampled; do
      gunzip -c bench/dflash-data/short/$f.jsonl.gz | sed 's/"id": "train-/"id": "short-/' > $DATA/short-$f.jsonl
    done
  fi
  cp bench/dflash-data/history-*.json $DATA/ 2>/dev/null  # earlier runs' curves, for eval's chart
  wc -l $DATA/*.jsonl
  ;;
data)
  seconds=${2:-200}
  [ -f $DATA/prompts.jsonl ] || { mkdir -p $DATA && cp bench/dflash-data/*.jsonl $DATA/; }
  SECONDS=0
  timeout "$seconds" python3 -m specchat generate --model $name --prompts $DATA/prompts.jsonl \
    --out $DATA/greedy.jsonl --batch-size 256 --max-tokens 768 --temperature 0 2>&1 | tr '\r' '\n' | grep -v "^ *$" | tail -1
  echo "greedy: $(wc -l < $DATA/greedy.jsonl) replies in $SECONDS s"
  SECONDS=0
  timeout "$seconds" python3 -m specchat generate --model $name --prompts $DATA/prompts.jsonl \
    --out $DATA/sampled.jsonl --batch-size 256 --max-tokens 768 --temperature 0.7 --top-p 0.8 --top-k 20 \
    --seed 1 2>&1 | tr '\r' '\n' | grep -v "^ *$" | tail -1
  echo "sampled: $(wc -l < $DATA/sampled.jsonl) replies in $SECONDS s"
  gzip -c $DATA/greedy.jsonl > "$OUT/greedy.jsonl.gz"; gzip -c $DATA/sampled.jsonl > "$OUT/sampled.jsonl.gz"
  ;;
profile)
  model=$name; [ -n "${SHAPE:-}" ] && model="$SHAPE --random"
  for batch in ${BATCHES:-8 16 32}; do
    trace=""; [ "$batch" = 16 ] && trace="--trace 12"
    timeout 200 python3 bench/gpu/dflash_step_profile.py $model $DATA/prompts.jsonl $DATA/greedy.jsonl \
      --layers "${2:-2}" --batch-size $batch --anchors 256 --steps 10 $trace 2>&1 | grep -v "Warn\|warn\|tokenizer" | tail -24
  done
  ;;
train)
  layers=${2:-2}; minutes=${3:-9}; batch=${4:-8}; lr=${5:-6e-4}
  dir=$(drafter "$layers")
  resume=""; [ -f "$dir/training/checkpoint.pt" ] && resume="--resume"
  prompts=$DATA/prompts.jsonl; replies=$(ls $DATA/greedy.jsonl $DATA/sampled.jsonl 2>/dev/null)
  if [ -f $DATA/short-prompts.jsonl ] && [ -z "${NO_SHORT:-}" ]; then  # both prompt sets
    prompts=$DATA/all-prompts.jsonl; cat $DATA/prompts.jsonl $DATA/short-prompts.jsonl > $prompts
    replies="$replies $DATA/short-greedy.jsonl $DATA/short-sampled.jsonl"
  fi
  timeout "${TRAIN_TIMEOUT:-595}" python3 -m specchat train-dflash --model $name --out "$dir" --layers "$layers" \
    --prompts $prompts --replies $replies \
    --minutes "$minutes" --checkpoint-minutes 3 --batch-size "$batch" --learning-rate "$lr" --anchors 256 ${EXTRA:-} $resume 2>&1 \
    | tr '\r' '\n' | grep -v "^ *$" | awk 'NR % 200 == 0 || /drafter written|Error|error|specchat:/' | tail -8
  cp "$dir/training/history.json" "$OUT/history-l$layers${TAG:-}.json"; cp "$dir/DATA.md" "$OUT/"
  cp "$dir/training/history.json" "$DATA/history-l$layers${TAG:-}.json"  # for eval's chart, a call later
  ;;
eval)
  dirs=$(ls -d "$SPECCHAT_CACHE/$name"/dflash-l* 2>/dev/null)
  timeout 400 python3 bench/gpu/dflash_tau.py $name $dirs --held-out $DATA/eval.jsonl --json "$OUT/tau.json"
  python3 bench/gpu/dflash_curve.py $DATA/history-l*.json --out "$OUT/dflash-training.png"
  ;;
bench)
  for prompt in edit explain; do
    timeout 280 python3 -m specchat bench table --model $name --dflash "$(drafter "$2")" --prompts $prompt \
      --k 2 3 4 8 15 auto --repeats 2 --warmup 1 --no-peers --out "$OUT/bench-dflash-l$2${TAG:-}-$prompt" 2>&1 \
      | grep -v "Warn\|warn\|regex" | grep "^|\|^#"
  done
  ;;
costs)
  timeout 200 python3 bench/gpu/dflash_costs.py $name "$(drafter "$2")" 2>&1 | grep -v "Warn\|warn\|regex" \
    | tee "$OUT/costs-l$2${TAG:-}.txt" | tail -16
  ;;
exact)
  timeout 300 python3 bench/gpu/dflash_exact.py $name "$(drafter "$2")" --held-out $DATA/eval.jsonl 2>&1 \
    | grep -v "Warn\|warn\|regex" | tee "$OUT/exact-l$2${TAG:-}.txt" | tail -20
  ;;
esac
