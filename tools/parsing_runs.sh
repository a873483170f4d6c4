#!/usr/bin/env bash
# §6.3 at a CPU's scale: the Transformer and Part 8's attentional LSTM trained on the Penn Treebank
# sample's training files (the split of nbs/11_trees.ipynb), three seeds each, every epoch's weights
# kept; then every run and the right-branching baseline scored on the test files with EVALB's rules,
# greedily and with the paper's search (beam 21, alpha 0.3, input + 300), each search writing only
# trees and unconstrained, and each epoch scored on the validation files (tools/parsing_scores.py).
# Runs go to RUNS_DIR/NAME-seedS (resumed if there); what the chapter reads goes to RESULTS_DIR. The
# treebank: $TREEBANK_DIR, or nltk's data folders.
#   bash tools/parsing_runs.sh                    # both systems, seeds 1 to 3 (hours: the chapter)
#   SYSTEMS=transformer SEEDS=1 bash tools/parsing_runs.sh
#   SYSTEMS=transformer-4x1024 SEEDS=1 bash tools/parsing_runs.sh   # the paper's size: a GPU's work
# EPOCHS replaces each system's own number; TRAIN_ARGS are added to every train command, SCORE_ARGS
# to the scoring (tools/gpu_runs.sh's dry run uses both for tiny sizes).
set -euo pipefail
cd "$(dirname "$0")/.."
SYSTEMS=${SYSTEMS:-"transformer lstm"}
SEEDS=${SEEDS:-"1 2 3"}
RUNS_DIR=${RUNS_DIR:-runs/parsing}
RESULTS_DIR=${RESULTS_DIR:-results/parsing}
declare -A ARGS=(  # each system's model and batches (the Transformer: more, smaller steps)
  [transformer]="--model small --dropout 0.1 --max-tokens 1024 --warmup 1000"
  [lstm]="--arch lstm --dropout 0.2 --max-tokens 4096 --warmup 400"
  [transformer-4x1024]="--config tools/parsing-4x1024.toml --max-tokens 4096 --warmup 1000"
)
declare -A EPOCHS_OF=([transformer]=40 [lstm]=40 [transformer-4x1024]=40)
mkdir -p "$RESULTS_DIR"
torch_version=$(python -c "import torch; print(torch.__version__)")
echo "$(date -u +%F) $(uname -m), $(nproc --all) cores, torch $torch_version" \
  > "$RESULTS_DIR/machine.txt"
runs=()
for name in $SYSTEMS; do
  for seed in $SEEDS; do
    out=$RUNS_DIR/$name-seed$seed
    resume=$([ -f "$out/last.pt" ] && echo --resume || true)
    epochs=${EPOCHS:-${EPOCHS_OF[$name]}}
    echo "== $name, seed $seed, $epochs epochs -> $out"
    # shellcheck disable=SC2086  # the flags are words
    annotated-transformer train --corpus treebank --out "$out" ${ARGS[$name]} --seed "$seed" \
      --epochs "$epochs" --keep-epochs "$epochs" --quiet $resume ${TRAIN_ARGS:-}
    cp "$out/history.json" "$RESULTS_DIR/$name-seed$seed-history.json"
    runs+=("$out")
  done
done
# shellcheck disable=SC2086
python tools/parsing_scores.py "${runs[@]}" --out "$RESULTS_DIR" --val-epochs ${SCORE_ARGS:-}
