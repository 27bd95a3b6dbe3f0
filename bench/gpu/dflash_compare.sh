#!/usr/bin/env bash
# Two-layer drafters trained one after another at equal steps (a cosine over STEPS each, whatever
# the speed), each on its own data or options: the recipe's A/B on one machine, then
# `dflash.sh eval` measures them all side by side and draws their curves.
#   dflash_compare.sh STEPS NAME:SETS[:OPTIONS[:CODE]] ...
# SETS: "all" (every staged set with replies), "first" (the first set alone), or the other sets to
# read beside the first, comma-separated ("short", "short,more"); OPTIONS go to train-dflash as
# they are ("--seed=1"); CODE: a folder holding another commit's engine and specchat (`git archive
# COMMIT engine specchat | tar -x -C .old`, carried), whose trainer runs instead of this tree's.
# Each drafter is dflash-l2-NAME in the cache; its history comes back as history-l2-NAME.json.
#   dflash_compare.sh 1000 ls:short all:all all-s1:all:--seed=1 ls-a128:short:--anchors=128 \
#       ls-v32k:short:--draft-vocab=32768                  (ls-old:short::.old: an earlier trainer)
set -uo pipefail
steps=$1; shift
for variant in "$@"; do
  IFS=: read -r name sets options code <<< "$variant"
  echo "== $name: sets $sets, $steps steps ${options:-}${code:+, the trainer in $code}"
  export CODE="${code:-.}"
  case "$sets" in
    all) env -u SETS TAG="-$name" EXTRA="--steps $steps ${options:-}" bash bench/gpu/dflash.sh train 2 15 8 ;;
    first) SETS="" TAG="-$name" EXTRA="--steps $steps ${options:-}" bash bench/gpu/dflash.sh train 2 15 8 ;;
    *) SETS="${sets//,/ }" TAG="-$name" EXTRA="--steps $steps ${options:-}" bash bench/gpu/dflash.sh train 2 15 8 ;;
  esac
done
