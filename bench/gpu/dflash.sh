#!/usr/bin/env bash
# A DFlash drafter for the Coder-1.5B, trained and measured on one warm GPU machine (weights
# never come back: data, training, evaluation and bench run in calls back to back). Assumes the
# pack is in SPECCHAT_CACHE (bench/gpu/session.sh setup). The first prompt set and its replies are
# kept in the repository (bench/training-data/<pack>, packed by bench/cpu/pack_replies.py); other
# sets, made on the machine the code is read from, are carried in bench/dflash-data:
#   specchat dflash-prompts --out bench/dflash-data/prompts.jsonl --count 4000
#   specchat dflash-prompts --out bench/dflash-data/eval.jsonl --count 64 --held-out
# (gzip the large ones: a call carries 64 MiB in all, the tree and wheels included)
# One subcommand per call:
#   stage                  the prompts and replies kept in bench/training-data/<pack> (xz), then the
#                          carried ones of bench/dflash-data (*.jsonl, or gzipped), into /root/stage/data;
#                          each folder of bench/dflash-data (short/, more/: other prompt sets, with their
#                          replies where made) as SET-prompts.jsonl, SET-greedy.jsonl ... with ids renamed
#                          SET-N; and earlier runs' history-*.json (their curves join eval's chart)
#   data SECONDS           the target's greedy, then sampled, replies (T 0.7, top-p 0.8, top-k 20),
#                          each for at most SECONDS (BATCH: sequences at once, default 256), and where
#                          each run's time went; kept in /root/stage/data, gzipped copies to $OUT
#                          (keep them in bench/dflash-data: a later machine takes them from there);
#                          SET=more: that staged set's prompts (its copies come back as more-*.jsonl.gz:
#                          keep them as bench/dflash-data/more/greedy.jsonl.gz ...)
#   profile [LAYERS]       where a training step's time goes (2 layers unless LAYERS; batch 8, 16, 32,
#                          or BATCHES="16 32"; the largest CUDA kernels of batch 16, or TRACE_BATCH's;
#                          the drafter vocabulary train-dflash drafts over), before training;
#                          SPECCHAT_CUDNN_TARGET=1 (here or for train): cuDNN's attention for the
#                          frozen target's pass alone (the sixteenth run's pace had it); CUDNN=1:
#                          cuDNN's attention among torch's choices (the engine leaves it out: a plan per shape);
#                          SHAPE=qwen2.5-1.5b: that shape's random weights, no pack needed (while staging)
#   train LAYERS MINUTES [BATCH] [LR]   train a LAYERS-layer drafter for MINUTES, BATCH samples a
#                          step (default 8) at peak learning rate LR (default 6e-4), started from the target's
#                          last layers (EXTRA=--no-start-from-target: random); rerun the line to resume
#                          (TRAIN_TIMEOUT: seconds, default 595; longer for a run in `session.sh bg`).
#                          Every staged prompt set with its replies (NO_SHORT=1: the first set only;
#                          SETS="short": the first set and these). EXTRA="--steps N": a cosine over N steps
#                          whatever the speed (runs compared at equal samples).
#                          TAG=-x names the drafter dflash-lLAYERS-x (runs to compare side by side), EXTRA
#                          passes more train-dflash options (EXTRA=--standardize-features, EXTRA="--distill 1");
#                          CODE=DIR runs the trainer of the tree unpacked in DIR (git archive COMMIT engine specchat);
#                          START=NAME starts from a kept drafter restored as dflash-NAME (training carried
#                          over from an earlier machine: `restore NAME` first)
#   eval                   tau at k = 15 of every drafter trained here, beside a random one (the bench's
#                          prompts, the held-out ones and those of long held-out code); the
#                          loss/tau curves as a PNG (every staged and new history, or CURVES="FILES")
#   bench LAYERS           the bench rows (plain, n-gram and DFlash at k 2 3 4 8 15 and auto, or K="4 15 auto";
#                          greedy and sampled) with it; SAMPLED=1: the sampled rows' drafts drawn from the drafter's own
#                          distribution (--sample-drafts, the min(1, p/q) rule)
#   exact LAYERS           float32 target and drafter: DFlash's replies against plain decoding, token for token
#   keep LAYERS [FIRST]    the drafter's files (its checkpoint aside) back to the machine the code is read
#                          from, as a tar in parts of 16 MB, 4 a call and the checksum (files back are 64 MiB
#                          in all a call): FIRST 0, then 4, 8, 12 (a two-layer drafter is 14 parts); keep
#                          them untracked in .gpu-keep/ (stage_coder.sh empties .gpu/)
#   restore NAME           a drafter kept so (its parts and checksum carried into /root/stage as the GGUF's
#                          are) back into the cache as dflash-NAME, once the parts add up to the checksum:
#                          no training needed to measure it again
#   all LAYERS MINUTES     a whole run as one background job (`session.sh bg all "dflash.sh all 2 12"`,
#                          then `session.sh wait all` calls back to back): train, keep's parts made at
#                          once (a drafter outlives a machine taken back while idle), the bench rows
#                          (K), eval, costs, then the conversation (session.sh adaptive, DFlash beside
#                          n-gram); each part's output a file of the job's $OUT
#   ahead-ab LAYERS        the bench rows with the next step's pass drafted behind each verify step
#                          (SPECCHAT_DRAFT_AHEAD=1) and after the host reads it (0), alternating, ROUNDS
#                          rounds (default 2; K, default "4 8 auto", PROMPTS as for bench); each run's JSON in $OUT/ahead-A-R
#   auto-check LAYERS      k auto with the drafter, as one background job: step by step against fixed k
#                          (bench/gpu/auto_k_steps.py), the host's time between steps (host_time.py), the
#                          bench rows at k 3 4 5 8 auto, the conversation (session.sh adaptive, DFlash
#                          beside n-gram, then again with SPECCHAT_WITNESS=0), then k auto where it sits out
#                          (session.sh auto-plain); each part's output a file of $OUT
#   train-check LAYERS MINUTES   as one background job: train (as `train`), keep's parts made at once,
#                          then the conversation with the witness off and on (session.sh adaptive, DFlash
#                          beside n-gram; PAIRS pairs, default 2, of ROUNDS rounds each, default 2,
#                          alternating, since the host's pace drifts between runs a minute apart), then
#                          the bench rows at K (default "4 8 auto"); each part's output a file of $OUT
#   witness-ab LAYERS      train-check's measurements alone, with a drafter trained before
#   costs LAYERS|random    where a DFlash step's time goes: host against device for the drafter's pass and
#                          the verify step with and without states (bench/gpu/dflash_costs.py); random: a
#                          random two-layer drafter (no training needed: its times are a trained one's)
set -uo pipefail
source bench/gpu/common.sh
case "$1" in profile|bench|costs|ahead-ab|auto-check) quiet_gpu || exit 3;; esac
name=qwen2.5-coder-1.5b
DATA=${DATA:-/root/stage/data}
drafter() { echo "$SPECCHAT_CACHE/$name/dflash-l$1${TAG:-}"; }
case "$1" in
stage)
  # every file of bench/dflash-data as X.jsonl in $DATA (gzipped ones unpacked: the carried tree
  # stays under its 64 MiB), each folder's (another prompt set) as SET-X.jsonl with its ids
  # renamed SET-N, since every set numbers them alike
  mkdir -p $DATA
  unpack() { case "$1" in *.xz) xzcat "$1";; *) zcat -f "$1";; esac; }
  # the sets kept in the repository (bench/training-data/<pack>) first, then bench/dflash-data's,
  # whose files replace theirs of the same name
  for root in bench/training-data/$name bench/dflash-data; do
    for f in $root/*.jsonl $root/*.jsonl.gz $root/*.jsonl.xz $root/*/*.jsonl $root/*/*.jsonl.gz $root/*/*.jsonl.xz; do
      [ -f "$f" ] || continue
      file=$(basename "${f%.[gx]z}"); dir=$(dirname "$f"); set=""
      [ "$dir" != $root ] && set=$(basename "$dir")
      if [ -n "$set" ]; then
        unpack "$f" | sed "s/\"id\": \"train-/\"id\": \"$set-/" > "$DATA/$set-$file"
      else
        unpack "$f" > "$DATA/$file"
      fi
    done
  done
  cp bench/dflash-data/history-*.json $DATA/ 2>/dev/null  # earlier runs' curves, for eval's chart
  wc -l $DATA/*.jsonl
  ;;
data)
  seconds=${2:-200}; set=${SET:+$SET-}
  [ -f $DATA/prompts.jsonl ] || bash "$0" stage > /dev/null
  SECONDS=0
  # SIGINT at the time limit: the run writes its last line (where the time went) before it stops
  timeout -s INT -k 30 "$seconds" python3 -m specchat generate --model $name --prompts $DATA/${set}prompts.jsonl \
    --out $DATA/${set}greedy.jsonl --batch-size ${BATCH:-256} --max-tokens 768 --temperature 0 2>&1 | tr '\r' '\n' \
    | grep "appended" | tee -a "$OUT/${set}data-times.txt"
  echo "greedy: $(wc -l < $DATA/${set}greedy.jsonl) replies in $SECONDS s"
  SECONDS=0
  timeout -s INT -k 30 "$seconds" python3 -m specchat generate --model $name --prompts $DATA/${set}prompts.jsonl \
    --out $DATA/${set}sampled.jsonl --batch-size ${BATCH:-256} --max-tokens 768 --temperature 0.7 --top-p 0.8 --top-k 20 \
    --seed 1 2>&1 | tr '\r' '\n' | grep "appended" | tee -a "$OUT/${set}data-times.txt"
  echo "sampled: $(wc -l < $DATA/${set}sampled.jsonl) replies in $SECONDS s"
  for f in greedy sampled; do gzip -c $DATA/${set}$f.jsonl > "$OUT/${set}$f.jsonl.gz"; done
  ;;
profile)
  model=$name; [ -n "${SHAPE:-}" ] && model="$SHAPE --random"
  for batch in ${BATCHES:-8 16 32}; do
    trace=""; [ "$batch" = "${TRACE_BATCH:-16}" ] && trace="--trace 12"
    timeout 200 python3 bench/gpu/dflash_step_profile.py $model $DATA/prompts.jsonl $DATA/greedy.jsonl \
      --layers "${2:-2}" --batch-size $batch --anchors 256 --steps 10 $trace ${CUDNN:+--cudnn} 2>&1 \
      | grep -v "Warn\|warn\|tokenizer" | tail -$([ -n "$trace" ] && echo 48 || echo 24)
  done
  ;;
train)
  layers=${2:-2}; minutes=${3:-9}; batch=${4:-8}; lr=${5:-6e-4}
  dir=$(drafter "$layers")
  resume=""; [ -f "$dir/training/checkpoint.pt" ] && resume="--resume"
  # START=NAME: a new run from a kept drafter restored as dflash-NAME (its weights, a fresh schedule)
  [ -z "$resume" ] && [ -n "${START:-}" ] && resume="--start-from $SPECCHAT_CACHE/$name/dflash-$START"
  prompts=$DATA/prompts.jsonl; replies=$(ls $DATA/greedy.jsonl $DATA/sampled.jsonl 2>/dev/null)
  if [ -z "${NO_SHORT:-}" ]; then  # every staged set with replies
    prompts=$DATA/all-prompts.jsonl; cp $DATA/prompts.jsonl $prompts
    for p in $DATA/*-prompts.jsonl; do
      set=$(basename "$p" -prompts.jsonl)
      [ "$set" = all ] || [ ! -f "$DATA/$set-greedy.jsonl" ] && continue
      [ -n "${SETS+x}" ] && [[ " $SETS " != *" $set "* ]] && continue  # SETS: only these of the others
      cat "$p" >> $prompts; replies="$replies $(ls $DATA/$set-greedy.jsonl $DATA/$set-sampled.jsonl 2>/dev/null)"
    done
  fi
  # CODE=DIR: the trainer of another tree (an earlier commit's engine and specchat, unpacked
  # there), for an A/B of the code itself; python -m reads the package of the folder it runs in
  (cd "${CODE:-.}" && timeout "${TRAIN_TIMEOUT:-595}" python3 -m specchat train-dflash --model $name --out "$dir" \
    --layers "$layers" --prompts $prompts --replies $replies \
    --minutes "$minutes" --checkpoint-minutes 3 --batch-size "$batch" --learning-rate "$lr" --anchors 256 ${EXTRA:-} $resume 2>&1) \
    | tr '\r' '\n' | grep -v "^ *$" | tee "$DATA/train-l$layers${TAG:-}.log" \
    | awk 'NR % 200 == 0 || /drafter written|Error|error|specchat:/' | tail -8
  # a run that died: its traceback, which the filter above keeps out (the whole log stays in $DATA)
  grep -q "Traceback" "$DATA/train-l$layers${TAG:-}.log" && grep -v "Warn\|warn" "$DATA/train-l$layers${TAG:-}.log" | tail -25
  cp "$dir/training/history.json" "$OUT/history-l$layers${TAG:-}.json"; cp "$dir/DATA.md" "$OUT/"
  cp "$dir/training/history.json" "$DATA/history-l$layers${TAG:-}.json"  # for eval's chart, a call later
  ;;
eval)
  dirs=$(ls -d "$SPECCHAT_CACHE/$name"/dflash-l* 2>/dev/null)
  long=""; [ -f $DATA/eval-long.jsonl ] && long="--held-out-long $DATA/eval-long.jsonl"
  timeout 400 python3 bench/gpu/dflash_tau.py $name $dirs --held-out $DATA/eval.jsonl $long --json "$OUT/tau.json"
  python3 bench/gpu/dflash_curve.py ${CURVES:-$DATA/history-l*.json} --out "$OUT/dflash-training.png"
  ;;
bench)  # the prompts in one run: one load of the target and drafter, one capture of their graphs
  prompts=${PROMPTS:-edit explain}
  timeout 540 python3 -m specchat bench table --model $name --dflash "$(drafter "$2")" --prompts $prompts \
    --k ${K:-2 3 4 8 15 auto} --repeats 2 --warmup 1 --no-peers ${SAMPLED:+--sample-drafts} \
    --out "$OUT/bench-dflash-l$2${TAG:-}${SAMPLED:+-sampled}" 2>&1 \
    | grep -v "Warn\|warn\|regex" | grep "^|\|^#"
  ;;
ahead-ab)
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for ahead in 0 1; do
      SPECCHAT_DRAFT_AHEAD=$ahead timeout 280 python3 -m specchat bench table --model $name --dflash "$(drafter "$2")" \
        --prompts ${PROMPTS:-edit explain} --k ${K:-4 8 auto} --repeats 2 --warmup 1 --no-peers --out "$OUT/ahead-$ahead-$round" 2>&1 \
        | grep -v "Warn\|warn\|regex" | grep "^| \(prompt\|edit\|explain\|sampled\|DFlash\)" | sed "s/^/ahead $ahead, round $round: /"
    done
  done
  ;;
auto-check)
  timeout 240 python3 bench/gpu/auto_k_steps.py --model $name --dflash "$(drafter "$2")" --repeats 3 2>&1 \
    | grep -v "Warn\|warn\|regex" > "$OUT/auto-k-steps.txt"
  timeout 200 python3 bench/gpu/host_time.py --model $name --dflash "$(drafter "$2")" 2>&1 \
    | grep -v "Warn\|warn\|regex" > "$OUT/host-time.txt"
  K="3 4 5 8 auto" bash "$0" bench "$2" > "$OUT/bench-auto.txt" 2>&1
  # the conversation with the drafter drafting ahead behind its own steps only, then as a
  # witness of the copy too: what the witness is worth on the GPU
  SPECCHAT_WITNESS=0 DFLASH="$(drafter "$2")" NO_DRAFT=1 ROUNDS=2 bash bench/gpu/session.sh adaptive conversation \
    > /dev/null 2>&1
  mv "$OUT/adaptive-conversation.txt" "$OUT/adaptive-conversation-no-witness.txt"
  DFLASH="$(drafter "$2")" NO_DRAFT=1 ROUNDS=2 bash bench/gpu/session.sh adaptive conversation > /dev/null 2>&1
  bash bench/gpu/session.sh auto-plain > /dev/null 2>&1
  ;;
costs)
  which=$(drafter "$2"); [ "$2" = random ] && which=""  # a random two-layer drafter: the times are the same
  timeout 200 python3 bench/gpu/dflash_costs.py $name $which 2>&1 | grep -v "Warn\|warn\|regex" \
    | tee "$OUT/costs-l$2${TAG:-}.txt" | tail -18
  ;;
keep)  # parts and their checksum made once per drafter, in a folder of its own moved into place whole
  dir=$(drafter "$2"); base=$(basename "$dir"); kept=/root/stage/keep/$base
  if [ ! -f "$kept/$base.sha256" ]; then
    rm -rf "$kept.tmp" && mkdir -p "$kept.tmp"
    tar -C "$(dirname "$dir")" --exclude=checkpoint.pt -cf - "$base" | split -b 16000000 -d -a 3 - "$kept.tmp/$base.tar.part"
    cat "$kept.tmp/$base".tar.part* | sha256sum | cut -d' ' -f1 > "$kept.tmp/$base.sha256"
    rm -rf "$kept" && mv "$kept.tmp" "$kept"
  fi
  ls "$kept/$base".tar.part* | tail -n +$(( ${3:-0} + 1 )) | head -4 | xargs -r -I{} cp {} "$OUT/"
  cp "$kept/$base.sha256" "$OUT/"  # beside the parts: restore checks them against it
  echo "$(ls "$kept/$base".tar.part* | wc -l) parts in all, sha256 $(cut -c1-16 "$kept/$base.sha256")"
  ;;
restore)  # carried as .gpu-keep/dflash-NAME.tar.partNNN and dflash-NAME.sha256, moved into /root/stage
  kept=/root/stage/dflash-$2
  if [ "$(cat $kept.tar.part* | sha256sum | cut -d' ' -f1)" != "$(cat $kept.sha256)" ]; then
    echo "dflash-$2: its parts do not add up to the kept drafter (a part missing or cut): not restored"; exit 1
  fi
  mkdir -p "$SPECCHAT_CACHE/$name" && cat $kept.tar.part* | tar -x -C "$SPECCHAT_CACHE/$name" \
    && rm $kept.tar.part* && ls "$SPECCHAT_CACHE/$name/dflash-$2"
  ;;
all)
  layers=${2:-2}; minutes=${3:-12}
  # unbuffered: a wait call's copy of train.txt shows how far training got
  PYTHONUNBUFFERED=1 TRAIN_TIMEOUT=${TRAIN_TIMEOUT:-$((minutes * 60 + 240))} bash "$0" train "$layers" "$minutes" > "$OUT/train.txt" 2>&1
  mkdir -p /root/stage/keep-out && OUT=/root/stage/keep-out bash "$0" keep "$layers" > "$OUT/keep.txt" 2>&1
  K="${K:-3 4 8 15 auto}" bash "$0" bench "$layers" > "$OUT/bench.txt" 2>&1
  bash "$0" eval > "$OUT/eval.txt" 2>&1
  bash "$0" costs "$layers" > "$OUT/costs.txt" 2>&1
  DFLASH=$(drafter "$layers") NO_DRAFT=1 ROUNDS=${ROUNDS:-2} bash bench/gpu/session.sh adaptive conversation \
    > "$OUT/adaptive.log" 2>&1
  ;;
train-check)
  layers=${2:-2}; minutes=${3:-15}
  PYTHONUNBUFFERED=1 TRAIN_TIMEOUT=${TRAIN_TIMEOUT:-$((minutes * 60 + 240))} bash "$0" train "$layers" "$minutes" > "$OUT/train.txt" 2>&1
  mkdir -p /root/stage/keep-out && OUT=/root/stage/keep-out bash "$0" keep "$layers" > "$OUT/keep.txt" 2>&1
  bash "$0" witness-ab "$layers"
  ;;
witness-ab)
  layers=${2:-2}
  for pair in $(seq 1 "${PAIRS:-2}"); do
    for witness in 0 1; do
      SPECCHAT_WITNESS=$witness DFLASH="$(drafter "$layers")" NO_DRAFT=1 ROUNDS=${ROUNDS:-2} \
        bash bench/gpu/session.sh adaptive conversation > /dev/null 2>&1
      mv "$OUT/adaptive-conversation.txt" "$OUT/conversation-witness-$witness-$pair.txt"
    done
  done
  K="${K:-4 8 auto}" bash "$0" bench "$layers" > "$OUT/bench.txt" 2>&1
  ;;
exact)
  timeout 300 python3 bench/gpu/dflash_exact.py $name "$(drafter "$2")" --held-out $DATA/eval.jsonl 2>&1 \
    | grep -v "Warn\|warn\|regex" | tee "$OUT/exact-l$2${TAG:-}.txt" | tail -20
  ;;
esac
