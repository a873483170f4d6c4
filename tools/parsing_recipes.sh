#!/usr/bin/env bash
# §6.3's recipe search (issue 49): seed 1 of each system trained with its first settings and with
# one setting changed, scored on the validation files only (constrained greedy search, each kept
# epoch and the last 5 and 10 averaged), so a recipe is chosen on decoded F1, never on the test
# files; tools/parsing_runs.sh then trains the chosen recipes with three seeds.
#   TREEBANK_DIR=../shared/data/treebank bash tools/parsing_recipes.sh
#   RECIPES="transformer-dropout0.3" bash tools/parsing_recipes.sh
# TRAIN_ARGS are added to every train command, SCORE_ARGS to the scoring (the tests' tiny sizes).
# Runs go to RUNS_DIR/RECIPE (resumed if there), validation scores to RESULTS_DIR/RECIPE-val.json. A
# recipe that only adds epochs continues a three-seed run (copied from PARSING_RUNS, which
# tools/parsing_runs.sh wrote): resumed with more epochs, a run ends as one trained that long.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS_DIR=${RUNS_DIR:-runs/parsing-recipes}
RESULTS_DIR=${RESULTS_DIR:-results/parsing/recipes}
PARSING_RUNS=${PARSING_RUNS:-runs/parsing}
T="--model small --max-tokens 1024 --warmup 1000"  # the Transformer's batches and warmup
L="--arch lstm --max-tokens 4096 --warmup 400 --dropout 0.2"
declare -A ARGS=(  # a system's first settings (dropout 0.2; the LSTM 20 epochs), or one changed
  [transformer-dropout0.2]="$T --dropout 0.2 --epochs 40 --keep-epochs 40"  # the first settings
  [transformer-dropout0.1]="$T --dropout 0.1 --epochs 30 --keep-epochs 20"
  [transformer-dropout0.3]="$T --dropout 0.3 --epochs 30 --keep-epochs 20"
  [transformer-smoothing0]="$T --dropout 0.2 --smoothing 0 --epochs 30 --keep-epochs 20"
  [lstm-epochs40]="$L --epochs 40 --keep-epochs 20"
)
declare -A CONTINUES=([lstm-epochs40]=lstm-seed1)  # recipes that continue a three-seed run
RECIPES=${RECIPES:-"${!ARGS[*]}"}
mkdir -p "$RESULTS_DIR"
torch_version=$(python -c "import torch; print(torch.__version__)")
echo "$(date -u +%F) $(uname -m), $(nproc --all) cores, torch $torch_version" \
  > "$RESULTS_DIR/machine.txt"
for name in $RECIPES; do
  out=$RUNS_DIR/$name
  if [ -n "${CONTINUES[$name]:-}" ] && [ ! -e "$out" ]; then
    mkdir -p "$RUNS_DIR" && cp -r "$PARSING_RUNS/${CONTINUES[$name]}" "$out"
  fi
  resume=$([ -f "$out/last.pt" ] && echo --resume || true)
  echo "== $name -> $out"
  # shellcheck disable=SC2086  # the flags are words
  annotated-transformer train --corpus treebank --out "$out" ${ARGS[$name]} --seed 1 --quiet \
    $resume ${TRAIN_ARGS:-}
  cp "$out/history.json" "$RESULTS_DIR/$name-history.json"
  python tools/parsing_scores.py "$out" --out "$RESULTS_DIR" --val-epochs --no-test ${SCORE_ARGS:-}
done
