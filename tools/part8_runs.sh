#!/usr/bin/env bash
# Part 8's comparison: the recurrent systems and a small Transformer trained on Multi30k German->English with the
# same words, batches, schedule and decoding. Each run goes to runs/part8/PAIRS/NAME (resumed if it is there);
# its history and its test2016 scores (greedy and beam 4, `evaluate --json`) go to results/part8/, which the chapter
# reads. Settings: PAIRS (training pairs, a fixed random subset; "all" for all 29,000), EPOCHS, SYSTEMS (names below).
#   PAIRS=10000 EPOCHS=10 bash tools/part8_runs.sh          # the small-data setting
#   PAIRS=all EPOCHS=20 bash tools/part8_runs.sh            # full Multi30k (a GPU makes this minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=${PAIRS:-10000}
EPOCHS=${EPOCHS:-10}
SYSTEMS=${SYSTEMS:-"lstm lexical transformer lstm-deeper"}
declare -A ARGS=(
  [lstm]="--arch lstm"
  [lstm-deeper]="--arch lstm --enc-layers 2 --dec-layers 3"
  [lexical]="--arch lexical"
  [transformer]="--model small"
)
subset=$([ "$PAIRS" = all ] || echo "--train-pairs $PAIRS")
mkdir -p results/part8
echo "$(date -u +%F) $(uname -m), $(nproc) cores, $(python -c "import torch; print('torch', torch.__version__)")" > "results/part8/$PAIRS-machine.txt"
for name in $SYSTEMS; do
  out=runs/part8/$PAIRS/$name
  resume=$([ -f "$out/last.pt" ] && echo --resume || true)
  echo "== $name, $PAIRS pairs, $EPOCHS epochs -> $out"
  # shellcheck disable=SC2086
  annotated-transformer train --out "$out" ${ARGS[$name]} $subset --epochs "$EPOCHS" --max-tokens 2048 --warmup 200 --quiet $resume
  cp "$out/history.json" "results/part8/$PAIRS-$name-history.json"
  for beam in 1 4; do
    annotated-transformer evaluate --checkpoint "$out/last.pt" --beam "$beam" --json --quiet > "results/part8/$PAIRS-$name-beam$beam.json"
  done
done
