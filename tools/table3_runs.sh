#!/usr/bin/env bash
# The recurrent chapter's Table 3 on Multi30k: the paper's variations of its base model (rows A-E
# and the big model), rescaled to this dataset around the project's Multi30k Transformer (N=3,
# d_model=256, d_ff=1024, h=8 so d_k=32, pre-norm, dropout and label smoothing 0.1), each trained on
# all of Multi30k German->English with the same words, batches and schedule. Each run goes to
# RUNS_DIR/ROW (resumed if it is there; a row whose results are written is skipped); its history
# (validation perplexity) and its validation sacreBLEU with beam 4 (no averaging, as in the paper)
# go to RESULTS_DIR, which the chapter reads.
#   bash tools/table3_runs.sh                   # every row: about 3 minutes each on an H100
#   ROWS="base A1 E" EPOCHS=20 bash tools/table3_runs.sh
# RUNS_DIR (runs/table3), RESULTS_DIR (results/table3), TRAIN_ARGS (more flags for train), and
# DEADLINE (seconds since the epoch: no row starts after DEADLINE - ROW_SECONDS, default 180) let
# tools/gpu_runs.sh fit rows into its time.
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS=${EPOCHS:-20}
declare -A TOP=([D3]="smoothing = 0.0" [D4]="smoothing = 0.2")  # TrainConfig's settings
declare -A MODEL=(                                                 # ModelConfig's, over the Multi30k model's
  [base]=""
  [A1]="h = 1" [A2]="h = 4" [A3]="h = 16" [A4]="h = 32"
  [B1]="d_k = 8" [B2]="d_k = 16"
  [C1]="N = 1" [C2]="N = 2" [C3]="N = 4" [C4]="d_model = 128" [C5]="d_model = 512" [C6]="d_ff = 512" [C7]="d_ff = 2048"
  [D1]="dropout = 0.0" [D2]="dropout = 0.2" [D3]="" [D4]=""
  [E]=$'positions = "learned"\nmax_len = 256'  # a learned table as long as Multi30k needs (its pairs plus 50)
  [big]=$'d_model = 512\nd_ff = 2048\nh = 16\ndropout = 0.3'
)
ROWS=${ROWS:-"base A1 A2 A3 A4 B1 B2 C1 C2 C3 C4 C5 C6 C7 D1 D2 D3 D4 E big"}
for row in $ROWS; do  # every name checked before any training
  [[ -v MODEL[$row] ]] || { echo "tools/table3_runs.sh: unknown row '$row' in ROWS (rows: base A1-A4 B1 B2 C1-C7 D1-D4 E big)" >&2; exit 2; }
done
RUNS_DIR=${RUNS_DIR:-runs/table3}
RESULTS_DIR=${RESULTS_DIR:-results/table3}
read -r -a train_args <<< "${TRAIN_ARGS:-}"
mkdir -p "$RESULTS_DIR"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
torch_version=$(python -c "import torch; print('torch', torch.__version__)")
echo "$(date -u +%F) $(uname -m), $(nproc) cores, ${gpu:-no GPU}, $torch_version" \
  > "$RESULTS_DIR/machine.txt"
for row in $ROWS; do
  out=$RUNS_DIR/$row
  result=$RESULTS_DIR/$row-val-beam4.json
  if [ -s "$result" ]; then echo "== row $row: done ($result)"; continue; fi
  if [ -n "${DEADLINE:-}" ] && [ $(( $(date +%s) + ${ROW_SECONDS:-180} )) -gt "$DEADLINE" ]; then
    echo "== row $row and the rows after it: no time left (run again to continue)"
    break
  fi
  echo "== row $row, $EPOCHS epochs -> $out"
  if [ -f "$out/last.pt" ]; then
    annotated-transformer train --out "$out" --resume --epochs "$EPOCHS" --quiet "${train_args[@]}"
  else
    config=$(mktemp --suffix .toml)
    printf '%s\n[model]\n%s\n' "${TOP[$row]:-}" "${MODEL[$row]}" > "$config"
    annotated-transformer train --out "$out" --config "$config" --epochs "$EPOCHS" --quiet \
      "${train_args[@]}"
    rm -f "$config"
  fi
  cp "$out/history.json" "$RESULTS_DIR/$row-history.json"
  annotated-transformer evaluate --checkpoint "$out/last.pt" --split val --beam 4 --json --quiet \
    > "$result.tmp" && mv "$result.tmp" "$result"
done
