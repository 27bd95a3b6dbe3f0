#!/usr/bin/env bash
# Two-layer drafters trained one after another at equal steps (a cosine over STEPS each, whatever
# the speed) or, where STEPS reads "3min", at equal time (a cosine over 3 minutes each: what a
# faster recipe buys), each on its own data or options: the recipe's A/B on one machine, then
# `dflash.sh eval` measures them all side by side and draws their curves; dflash_best.py
# names the one whose held-out samples ended best.
#   dflash_compare.sh STEPS|MINUTESmin NAME:SETS[:OPTIONS[:CODE]] ...
# SETS: "all" (every staged set with replies), "first" (the first set alone), or the other sets to
# read beside the first, comma-separated ("short", "short,more"); OPTIONS go to train-dflash as
# they are ("--seed=1"); CODE: a folder holding another commit's engine and specchat (`git archive
# COMMIT engine specchat | tar -x -C .old`, carried), whose trainer runs instead of this tree's.
# Each drafter is dflash-l2-NAME in the cache; its history comes back as history-l2-NAME.json.
#   dflash_compare.sh 1000 ls:short all:all all-s1:all:--seed=1 ls-a128:short:--anchors=128 \
#       ls-v32k:short:--draft-vocab=32768                  (ls-old:short::.old: an earlier trainer)
set -uo pipefail
steps=$1; shift
if [[ $steps == *min ]]; then minutes=${steps%min}; bound=""; else minutes=15; bound="--steps $steps"; fi
for variant in "$@"; do
  IFS=: read -r name sets options code <<< "$variant"
  echo "== $name: sets $sets, ${bound:-$minutes minutes} ${options:-}${code:+, the trainer in $code}"
  export CODE="${code:-.}"
  case "$sets" in
    all) env -u SETS TAG="-$name" EXTRA="$bound ${options:-}" bash bench/gpu/dflash.sh train 2 "$minutes" 8 ;;
    first) SETS="" TAG="-$name" EXTRA="$bound ${options:-}" bash bench/gpu/dflash.sh train 2 "$minutes" 8 ;;
    *) SETS="${sets//,/ }" TAG="-$name" EXTRA="$bound ${options:-}" bash bench/gpu/dflash.sh train 2 "$minutes" 8 ;;
  esac
done
