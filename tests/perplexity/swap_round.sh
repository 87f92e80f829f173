#!/usr/bin/env bash
# A pre-reload script for loop mode (LLAMA_PERPLEXITY_PRE_RELOAD_SCRIPT), as a quant-sweep
# driver's tensor-swap.sh: round 1 renames CANDIDATE's bytes over SHARD (keeping the original
# as SHARD.orig), round 2 renames the original back, later rounds change nothing (so the
# reload reloads nothing and the tool exits).  usage: swap_round.sh COUNTER SHARD CANDIDATE
set -euo pipefail
counter=$1 shard=$2 cand=$3
round=$(( $(cat "$counter" 2>/dev/null || echo 0) + 1 ))
echo "$round" >"$counter"
case $round in
    1) ln -f "$shard" "$shard.orig"
       cp "$cand" "$shard.new" && mv -f "$shard.new" "$shard"
       echo "round 1: swapped $(basename "$cand") in" ;;
    2) mv -f "$shard.orig" "$shard"
       echo "round 2: restored the original" ;;
    *) echo "round $round: nothing to swap" ;;
esac
