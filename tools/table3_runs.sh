#!/usr/bin/env bash
# The recurrent chapter's Table 3 on Multi30k: the paper's variations of its base model (rows A-E
# and the big model), each rescaled around a base model of ours and trained with the same words,
# batches and schedule, every row with each of SEEDS. Two scales:
#
#   SCALE=full (default, for a GPU): around the project's Multi30k Transformer (N=3, d_model=256,
#     d_ff=1024, h=8 so d_k=32), on all 29,000 pairs, 20 epochs, seed 0: about 3 minutes a row on
#     an H100 (tools/gpu_runs.sh runs it).
#   SCALE=cpu: around the notebooks' CPU model (N=2, d_model=128, d_ff=512, h=4 so d_k=32), on one
#     fixed subset of 10,000 pairs (drawn by --subset-seed 0 for every seed), 8 epochs, seeds 0
#     and 1, two runs at a time with a thread each (JOBS): about 4 hours of CPU time, 2 on two cores.
#
# Both: pre-norm, dropout and label smoothing 0.1. Each run goes to RUNS_DIR/ROW-seedS (resumed if it
# is there); its history (validation perplexity) and its validation sacreBLEU with beam 4 (no
# averaging, as in the paper) go to RESULTS_DIR as ROW-seedS-history.json and
# ROW-seedS-val-beam4.json, which the chapter reads. A run whose results are written is skipped.
#   SCALE=cpu bash tools/table3_runs.sh
#   ROWS="base A1 E" SEEDS="0 1 2" EPOCHS=10 SCALE=cpu bash tools/table3_runs.sh
# RUNS_DIR, RESULTS_DIR, TRAIN_ARGS (more flags for train), JOBS (runs at a time), SUBSET (the cpu
# scale's pairs) and DEADLINE
# (seconds since the epoch: no run starts after DEADLINE - ROW_SECONDS, default 180) let
# tools/gpu_runs.sh fit rows into its time.
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE=${SCALE:-full}
declare -A TOP=([D3]="smoothing = 0.0" [D4]="smoothing = 0.2")  # TrainConfig's settings
case $SCALE in
  full)
    declare -A MODEL=(  # ModelConfig's, over the Multi30k model's
      [base]=""
      [A1]="h = 1" [A2]="h = 4" [A3]="h = 16" [A4]="h = 32"
      [B1]="d_k = 8" [B2]="d_k = 16"
      [C1]="N = 1" [C2]="N = 2" [C3]="N = 4" [C4]="d_model = 128" [C5]="d_model = 512"
      [C6]="d_ff = 512" [C7]="d_ff = 2048"
      [big]=$'d_model = 512\nd_ff = 2048\nh = 16\ndropout = 0.3'
    )
    defaults=(EPOCHS=20 SEEDS=0 JOBS=1 RUNS_DIR=runs/table3 RESULTS_DIR=results/gpu/table3)
    BASE=""  # a configuration file's model is the Multi30k model unless it says otherwise
    scale_args=()
    ;;
  cpu)
    declare -A MODEL=(  # over the CPU model's: the same steps, one size down
      [base]=""
      [A1]="h = 1" [A2]="h = 2" [A3]="h = 8" [A4]="h = 16"
      [B1]="d_k = 8" [B2]="d_k = 16"
      [C1]="N = 1" [C2]="N = 3" [C3]="N = 4" [C4]="d_model = 64" [C5]="d_model = 256"
      [C6]="d_ff = 256" [C7]="d_ff = 1024"
      [big]=$'d_model = 256\nd_ff = 1024\nh = 8\ndropout = 0.3'
    )
    defaults=(EPOCHS=8 SEEDS="0 1" JOBS=2 SUBSET=10000 RUNS_DIR=runs/table3-cpu
              RESULTS_DIR=results/table3-cpu)
    # the CPU model: the sizes of PRESETS["small"] (--model small)
    BASE=$(python -c 'from annotated_transformer.config import PRESETS
m = PRESETS["small"]
print(f"N = {m.N}\nd_model = {m.d_model}\nd_ff = {m.d_ff}\nh = {m.h}")')
    scale_args=(--train-pairs "${SUBSET:-10000}" --subset-seed 0 --max-tokens 2048 --warmup 200)
    ;;
  *)
    echo "tools/table3_runs.sh: unknown SCALE '$SCALE' (full or cpu)" >&2
    exit 2
    ;;
esac
MODEL+=([D1]="dropout = 0.0" [D2]="dropout = 0.2" [D3]="" [D4]="")
# a learned table as long as Multi30k needs (its pairs plus 50)
MODEL+=([E]=$'positions = "learned"\nmax_len = 256')
for setting in "${defaults[@]}"; do  # the scale's default, where the caller set nothing
  name=${setting%%=*}
  [ -n "${!name:-}" ] || export "$setting"
done
ROWS=${ROWS:-"base A1 A2 A3 A4 B1 B2 C1 C2 C3 C4 C5 C6 C7 D1 D2 D3 D4 E big"}
export SCALE ROWS

# A row's model settings: its own, then the base model's for the sizes it leaves alone.
model_settings() {
  local line
  printf '%s\n' "${MODEL[$1]}"
  while IFS= read -r line; do
    [ -z "$line" ] || grep -q "^${line%% =*} =" <<< "${MODEL[$1]}" || printf '%s\n' "$line"
  done <<< "$BASE"
}

# One run: train ROW with SEED (or resume it), then score it on val with beam 4.
run_one() {
  local row=$1 seed=$2
  local out=$RUNS_DIR/$row-seed$seed result=$RESULTS_DIR/$row-seed$seed-val-beam4.json
  if [ -s "$result" ]; then echo "== $row, seed $seed: done ($result)"; return; fi
  if [ -n "${DEADLINE:-}" ] && [ $(( $(date +%s) + ${ROW_SECONDS:-180} )) -gt "$DEADLINE" ]; then
    echo "== $row, seed $seed: no time left (run again to continue)"
    return
  fi
  echo "== $row, seed $seed, $EPOCHS epochs -> $out"
  local train_args
  read -r -a train_args <<< "${TRAIN_ARGS:-}"
  if [ -f "$out/last.pt" ]; then
    annotated-transformer train --out "$out" --resume --epochs "$EPOCHS" --quiet "${train_args[@]}"
  else
    local config
    config=$(mktemp --suffix .toml)
    printf '%s\n[model]\n%s\n' "${TOP[$row]:-}" "$(model_settings "$row")" > "$config"
    annotated-transformer train --out "$out" --config "$config" --epochs "$EPOCHS" \
      --seed "$seed" "${scale_args[@]}" --quiet "${train_args[@]}"
    rm -f "$config"
  fi
  cp "$out/history.json" "$RESULTS_DIR/$row-seed$seed-history.json"
  annotated-transformer evaluate --checkpoint "$out/last.pt" --split val --beam 4 --json --quiet \
    > "$result.tmp" && mv "$result.tmp" "$result"
}

if [ "${1:-}" = --one ]; then  # a worker that xargs started
  run_one "$2" "$3"
  exit
fi
for row in $ROWS; do  # every name checked before any training
  if [[ ! -v MODEL[$row] ]]; then
    echo "tools/table3_runs.sh: unknown row '$row' in ROWS" \
      "(rows: base A1-A4 B1 B2 C1-C7 D1-D4 E big)" >&2
    exit 2
  fi
done
mkdir -p "$RESULTS_DIR"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
torch_version=$(python -c "import torch; print('torch', torch.__version__)")
cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo 2>/dev/null | head -1 || true)
echo "$(date -u +%F) $(uname -m) ${cpu:+($cpu)}, $(nproc) cores, ${gpu:-no GPU}, $torch_version;" \
  "SCALE=$SCALE EPOCHS=$EPOCHS SEEDS=\"$SEEDS\" JOBS=$JOBS" > "$RESULTS_DIR/machine.txt"
if [ "$JOBS" -gt 1 ]; then  # each run a thread when several share the cores
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
fi
for row in $ROWS; do for seed in $SEEDS; do echo "$row $seed"; done; done \
  | xargs -P "$JOBS" -n 2 bash "$0" --one
