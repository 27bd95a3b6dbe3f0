#!/usr/bin/env bash
# On the GPU machine, after `gpu-stage` chunks of the Coder-1.5B GGUF and the wheels sit in
# /root/stage (see bench/gpu/stage_coder.sh). One subcommand per call:
#   setup    join and check the GGUF, convert it once as `specchat pull` does
#   tests    the CUDA tests (kernels, graphs, DFlash, batched decoding)
#   steps-ab the step bench on this tree and on an older one (.oldtree, carried), alternating,
#            Qwen3-4B shape (random weights) and the Coder-1.5B's real weights
#   chat     the chat app driven headless: engine alone against the screen (specchat bench chat;
#            DRAFT=1: the 0.5B draft model's cases as well; DFLASH=DIR: a trained drafter's)
#   batch    batched decoding against transformers' batched generate (bench/gpu/batch_bench.py)
#   batch-runs  batched decoding with one decode step per host wait against runs of 8 (no transformers)
#   adaptive k and proposer "auto" against fixed settings: bench prompts, then the conversation
#            (bench/gpu/adaptive.py; needs the qwen2.5-coder-0.5b pack in the cache as well;
#            DFLASH=DIR adds a trained drafter, NO_DRAFT=1 leaves the draft model out; the
#            conversation's median of 3 rounds, ROUNDS=N; TOKENS=512 REPEATS=6: longer replies and
#            more runs a row, for a steadier ratio against the best fixed k)
#   adaptive-steps  where k auto spends its steps: verify time per step length, k taken, probes,
#            the policy's host time per step (bench/gpu/adaptive_steps.py); `adaptive-steps conversation`:
#            the conversation turn by turn, where proposer auto's steps went against n-gram k auto
#            (DFLASH=DIR, NO_DRAFT=1 as for adaptive)
#   auto-plain  what k auto costs per token where it mostly sits out (random-weight shapes, no
#            pack needed: bench/gpu/auto_plain.py), against plain decoding
#   pdl      the step bench with dependent launch (SPECCHAT_PDL), SiLU in the gate/up epilogue
#            (SPECCHAT_SILU_EPILOGUE), RoPE in the q/k/v epilogue (SPECCHAT_ROPE_EPILOGUE), the
#            attention's merge in its last split (SPECCHAT_ATTN_MERGE), RoPE in the attention kernel
#            (SPECCHAT_ATTN_ROPE), the MLP's norm in o_proj (SPECCHAT_O_NORM) and the next layer's in
#            down_proj (SPECCHAT_DOWN_NORM) off and on, engine/kernels/overlap.py: Qwen2.5-0.5B shape,
#            the Coder-1.5B's real weights, Qwen3-4B shape (SHAPES, SETTINGS="pdl,silu,rope,merge,arope,
#            onorm,dnorm ..." choose)
#   bg JOB CMD...  CMD in a process session of its own (it outlives the call, and the machine stays
#            held while calls keep coming), run in a copy of this tree (later calls replace the tree);
#            its log in /root/stage/bg/JOB.log, its $OUT in /root/stage/bg/JOB.out. For work that
#            needs no quiet GPU (tests while packs are staged); timing subcommands refuse to run
#            while another process holds GPU memory (common.sh's quiet_gpu)
#   wait JOB [SECONDS]  until JOB ends or SECONDS pass (default 580): its log's tail, its files into $OUT
#   first    what a machine runs first, in the background while the pack stages (`bg first
#            "bash bench/gpu/session.sh first"`, after `dflash.sh stage`): the DFlash trainer's
#            step and its largest kernels (random weights of the 1.5B shape), the tests,
#            sampling-ab with SAMPLING=1; each part's output a file of the job's $OUT
#   sampling-ab  the fused top-k draw (SPECCHAT_FUSED_SAMPLING) off and on, each in processes of
#            its own, alternating: whole replies of random-weight shapes (bench/gpu/run_ahead.py), and
#            whether both drew the same tokens
#   inspector  the step inspector off and on (bench/gpu/inspector.py), on this tree and, when carried,
#            on an older one without it (.oldtree): off must match the old tree within 2 %
set -uo pipefail
export SPECCHAT_CACHE=/root/stage/cache
source bench/gpu/common.sh
case "$1" in steps-ab|pdl|batch|batch-runs|chat|adaptive|adaptive-steps|auto-plain|inspector|sampling-ab) quiet_gpu || exit 3;; esac
name=qwen2.5-coder-1.5b
file=$name-instruct-q4_k_m.gguf
case "$1" in
setup)
  for pack in qwen2.5-coder-1.5b qwen2.5-coder-0.5b; do
    gguf=$pack-instruct-q4_k_m.gguf
    mkdir -p "$SPECCHAT_CACHE/$pack"
    if ls /root/stage/$gguf.part* >/dev/null 2>&1; then
      cat /root/stage/$gguf.part* > "$SPECCHAT_CACHE/$pack/$gguf" && rm /root/stage/$gguf.part*
    fi
    [ -f "$SPECCHAT_CACHE/$pack/$gguf" ] || continue
    sha256sum "$SPECCHAT_CACHE/$pack/$gguf"
    SECONDS=0
    python3 -m specchat pull $pack 2>&1 | tail -1
    echo "$pack converted in $SECONDS s"
  done
  ;;
tests)
  # each failure's one line (where and what), then the counts
  timeout 150 python3 -m pytest -q -p no:cacheprovider -p no:benchmark -p no:warnings -n 8 -rfE --tb=line \
    tests/test_cuda_kernels.py 2>&1 | grep -E "^(FAILED|ERROR|E )|passed|failed" | tail -20
  timeout 300 python3 -m pytest -q -p no:cacheprovider -p no:benchmark -p no:warnings -n 4 -rfE --tb=line \
    tests/test_cuda_graphs.py tests/test_dflash_cuda.py tests/test_batch_cuda.py tests/test_cuda_overlap.py 2>&1 \
    | grep -E "^(FAILED|ERROR|E )|passed|failed" | tail -30
  ;;
steps-ab)
  opts="--contexts 1024 --lengths 1 16 --repeats 100 --no-transformers --no-eager"
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for shape in "--random qwen3-4b" "--model $name"; do
      tag=$(echo "$shape" | awk '{print $2}')
      timeout 120 python3 -m specchat bench steps $shape $opts --json "$OUT/new-$tag-$round.json" 2>&1 \
        | grep -E "^ *1024 " | sed "s/^/new $tag: /"
      (cd .oldtree && PYTHONPATH=/tmp/site:. timeout 120 python3 -m specchat bench steps $shape $opts \
        --json "$OUT/old-$tag-$round.json" 2>&1 | grep -E "^ *1024 " | sed "s/^/old $tag: /")
    done
  done
  ;;
pdl)
  opts="--contexts 1024 --lengths 1 16 --repeats 100 --no-transformers --no-eager"
  for round in $(seq 1 "${ROUNDS:-1}"); do
    for tag in ${SHAPES:-qwen2.5-0.5b $name qwen3-4b}; do  # a preset's random weights, or a pack
      shape="--model $tag"; case $tag in qwen2.5-0.5b|qwen2.5-1.5b|qwen3-4b) shape="--random $tag";; esac
      case $tag in $name|qwen2.5-1.5b) shape="$shape --drafter-pass";; esac  # the issue's bound is the 1.5B's
      for setting in ${SETTINGS:-1,1,0,0,0,0,0 1,1,0,1,1,1,1}; do  # PDL (0, 1, decode), SiLU, RoPE,
        # merge, arope, onorm, dnorm
        IFS=, read -r pdl silu rope merge arope onorm dnorm <<< "$setting"
        rope=${rope:-0}; merge=${merge:-0}; arope=${arope:-0}; onorm=${onorm:-0}; dnorm=${dnorm:-0}
        SPECCHAT_PDL=$pdl SPECCHAT_SILU_EPILOGUE=$silu SPECCHAT_ROPE_EPILOGUE=$rope SPECCHAT_ATTN_MERGE=$merge \
          SPECCHAT_ATTN_ROPE=$arope SPECCHAT_O_NORM=$onorm SPECCHAT_DOWN_NORM=$dnorm timeout 100 \
          python3 -m specchat bench steps $shape $opts \
          --json "$OUT/pdl-$pdl$silu$rope$merge$arope$onorm$dnorm-$tag-$round.json" 2>&1 \
          | grep -E "^ *1024 |kernels\)|^chain |^DFlash drafter pass" \
          | sed "s/^/$pdl$silu$rope$merge$arope$onorm$dnorm $tag: /"
      done
    done
  done
  # one file back for all of them (a call brings back 8 files at most)
  tar -czf "$OUT/pdl-steps.tgz" -C "$OUT" $(cd "$OUT" && ls pdl*.json) && rm -f "$OUT"/pdl*.json
  ;;
batch)
  timeout 560 python3 bench/gpu/batch_bench.py $name --batch 16 64 128 256 --hf-batch 64 256 2>&1 \
    | grep -v "Warn\|warn" | tee "$OUT/batch.txt"
  ;;
batch-runs)
  for steps in 1 8; do
    timeout 280 python3 bench/gpu/batch_bench.py $name --batch 64 256 --hf-batch --run-steps $steps 2>&1 \
      | grep -v "Warn\|warn" | tee "$OUT/batch-runs-$steps.txt"
  done
  ;;
chat)
  timeout 560 python3 -m specchat bench chat --model $name ${DRAFT:+--draft qwen2.5-coder-0.5b} ${DFLASH:+--dflash "$DFLASH"} \
    --max-new-tokens 512 --k 15 4 --repeats 3 2>&1 \
    | grep -v "Warn\|warn" | tee "$OUT/bench-chat.txt"
  ;;
adaptive)
  timeout 590 python3 bench/gpu/adaptive.py --part "${2:-both}" ${DFLASH:+--dflash "$DFLASH"} ${NO_DRAFT:+--draft ""} \
    ${ROUNDS:+--conversation-repeats "$ROUNDS"} ${TOKENS:+--max-new-tokens "$TOKENS"} ${REPEATS:+--repeats "$REPEATS"} 2>&1 \
    | grep -v "Warn\|warn" | tee "$OUT/adaptive-${2:-both}.txt"
  ;;
adaptive-steps)
  timeout 590 python3 bench/gpu/adaptive_steps.py ${2:+--$2} ${DFLASH:+--dflash "$DFLASH"} ${NO_DRAFT:+--draft ""} 2>&1 \
    | grep -v "Warn\|warn" | tee "$OUT/adaptive-steps${2:+-$2}.txt"
  ;;
auto-plain)
  SPECCHAT_CACHE=/tmp/sc timeout 300 python3 bench/gpu/auto_plain.py 2>&1 | grep -v "Warn\|warn" | tee "$OUT/auto-plain.txt"
  ;;
bg)
  job=$2; shift 2; bg=/root/stage/bg; mkdir -p $bg && rm -rf $bg/$job.tree $bg/$job.out $bg/$job.rc
  cp -r . $bg/$job.tree && mkdir -p $bg/$job.out
  (cd $bg/$job.tree && OUT=$bg/$job.out setsid nohup bash -c "( $* ); echo \$? > $bg/$job.rc" > $bg/$job.log 2>&1 < /dev/null &)
  sleep 1; echo "$job started: $*"
  ;;
wait)  # the job's own end marker: a later call cannot see the job's process
  bg=/root/stage/bg; waited=0
  # a machine given back and lent afresh has no such job: say so at once, not after SECONDS
  [ -f $bg/$2.log ] || { echo "no job $2 on this machine (a fresh one: the last was given back)"; exit 2; }
  while [ ! -f $bg/$2.rc ] && [ "$waited" -lt "${3:-580}" ]; do sleep 2; waited=$((waited + 2)); done
  if [ -f $bg/$2.rc ]; then echo "$2 done (exit $(cat $bg/$2.rc))"; else echo "$2 still running after $waited s"; fi
  tail -n "${LINES:-40}" $bg/$2.log; cp -r $bg/$2.out/. "$OUT/" 2>/dev/null
  ;;
first)
  # where a training step's time goes, kernel by kernel (the twentieth run settled cuDNN for the
  # target's pass: slower), before the tests
  SHAPE=qwen2.5-1.5b BATCHES=8 TRACE_BATCH=8 bash bench/gpu/dflash.sh profile > "$OUT/profile-trainer.txt" 2>&1
  bash "$0" tests > "$OUT/tests.txt" 2>&1
  # the fused draw's timing only once its tests pass (SAMPLING=1): it held the GPU for minutes
  if [ -n "${SAMPLING:-}" ]; then bash "$0" sampling-ab > "$OUT/sampling-ab.txt" 2>&1; fi
  ;;
sampling-ab)
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for fused in 0 1; do
      SPECCHAT_FUSED_SAMPLING=$fused timeout 140 python3 bench/gpu/run_ahead.py --shapes ${SHAPES:-qwen2.5-1.5b qwen2.5-0.5b} \
        --tokens 384 --rounds 3 --save "$OUT/sampling-$fused-$round.json" 2>&1 | grep -E "^qwen" | sed "s/^/fused $fused: /"
    done
  done
  python3 -c "import json, sys; a, b = (json.load(open(f)) for f in sys.argv[1:]); print('same tokens, fused off and on:', a == b)" \
    "$OUT/sampling-0-1.json" "$OUT/sampling-1-1.json"
  # a step's kernels off and on: the sampled run's column against the greedy one's
  for fused in 0 1; do
    SPECCHAT_FUSED_SAMPLING=$fused SPECCHAT_PDL=0 timeout 120 python3 bench/gpu/step_kernels.py qwen2.5-1.5b --taps \
      > "$OUT/kernels-fused-$fused.txt" 2>&1; grep -E "^kernel|^total" "$OUT/kernels-fused-$fused.txt" | sed "s/^/fused $fused: /"
  done
  ;;
inspector)
  for round in $(seq 1 "${ROUNDS:-2}"); do
    timeout 280 python3 bench/gpu/inspector.py --label "new, round $round" 2>&1 | grep -v "Warn\|warn" \
      | tee -a "$OUT/inspector.txt"
    [ -d .oldtree ] && (cd .oldtree && PYTHONPATH=/tmp/site:. timeout 280 python3 ../bench/gpu/inspector.py \
      --label "old, round $round" 2>&1 | grep -v "Warn\|warn" | tee -a "$OUT/inspector.txt")
  done
  ;;
esac
