#!/usr/bin/env bash
# Every figure that needs a GPU, in one command: on one H100, about 25 minutes of wall time. Commit
# what it writes to results/gpu/ (the chapters and results/gpu/README.md read it from there).
#
#   MULTI30K_DIR=... bash tools/gpu_runs.sh       # on the GPU machine
#   bash tools/gpu_runs.sh --dry-run DIR          # tiny sizes, a few steps, on the CPU, into DIR
#
# The dry run takes the same path through every step with sizes a CPU does in a minute or two
# (tests/test_gpu_runs.py runs it), so the script is known to work before it meets a GPU. Its
# Multi30k is whatever $MULTI30K_DIR holds (the tests give it a small synthetic corpus).
#
# The steps, each writing into the results folder:
# 1. machine.txt: the GPU, the driver, torch and CUDA.
# 2. bench_gpu_training.txt: the training step of the paper's base model, timed as the multi-GPU
#    chapter does: float32, bfloat16, bfloat16 compiled, the fused loss, the nn.Transformer peer,
#    and the MFU of each.
# 3. multi30k-{words,subwords}-{eager,fast}: the Multi30k word-level run and the subword run
#    (--vocab-size 8000, shared and tied), each eager and with --compile --fused-loss: the training
#    log (seconds per epoch), the history, test2016 BLEU greedy and with beam 4 over the average of
#    the last 5 epochs.
# 4. table3/: as many full-data Table 3 rows (tools/table3_runs.sh) as fit in the time left of
#    BUDGET_MINUTES (default 25); rows already done are skipped, so a second call continues.
# 5. parsing/: §6.3's parser, 4 layers of width 1,024 (tools/parsing-4x1024.toml), trained on the
#    Penn Treebank sample ($TREEBANK_DIR) by tools/parsing_runs.sh and scored on its test files;
#    resumed where a previous call stopped.
set -euo pipefail
cd "$(dirname "$0")/.."

dry=false
out=results/gpu
if [ "${1:-}" = "--dry-run" ]; then
  dry=true
  out=${2:?"tools/gpu_runs.sh: --dry-run needs a folder to write into"}
elif [ $# -gt 0 ]; then
  echo "tools/gpu_runs.sh: unknown argument '$1' (usage: tools/gpu_runs.sh [--dry-run DIR])" >&2
  exit 2
fi
if ! $dry && ! python -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
  echo "tools/gpu_runs.sh: no GPU here; use --dry-run DIR to check the script on a CPU" >&2
  exit 2
fi
budget_seconds=$(( ${BUDGET_MINUTES:-25} * 60 ))
started=$SECONDS
mkdir -p "$out"
runs=$out/runs
if $dry; then
  bench=(--device cpu --preset tiny --vocab 1000 --max-tokens 2000 --peak-tflops 1 --rounds 1
         --steps 2 --skip-compile)
  size=(--model tiny --epochs 2 --max-tokens 500 --warmup 10)
  fast=(--fused-loss)  # torch.compile on a CPU needs a C++ compiler and minutes: left to the GPU
  subword_vocab=300
  average=2
  table3=(ROWS="base E" EPOCHS=1 TRAIN_ARGS="--max-tokens 500 --warmup 10")
  parsing=(EPOCHS=1 TRAIN_ARGS="--model tiny --max-tokens 500 --warmup 10"
           SCORE_ARGS="--limit 3 --searches greedy")
else
  bench=()
  size=()
  fast=(--compile --fused-loss)
  subword_vocab=8000
  average=5
  table3=()
  parsing=(EPOCHS=40)
fi

echo "== 1. the machine"
{
  date -u +%F
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null \
    || echo "no GPU (dry run)"
  python -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)"
} > "$out/machine.txt"

echo "== 2. the base model's training step"
python benchmarks/bench_gpu_training.py "${bench[@]}" > "$out/bench_gpu_training.txt"

echo "== 3. Multi30k, words and subwords, eager and fast"
for text in words subwords; do
  for mode in eager fast; do
    name=multi30k-$text-$mode
    args=("${size[@]}")
    [ "$text" = subwords ] && args+=(--vocab-size "$subword_vocab")
    [ "$mode" = fast ] && args+=("${fast[@]}")
    echo "   $name: train ${args[*]}"
    if [ -f "$runs/$name/last.pt" ]; then args+=(--resume); fi
    annotated-transformer train --out "$runs/$name" "${args[@]}" --quiet > "$out/$name-train.txt"
    cp "$runs/$name/history.json" "$out/$name-history.json"
    for search in "--beam 1" "--beam 4 --average-last $average"; do
      suffix=$([ "$search" = "--beam 1" ] && echo greedy || echo "beam4-avg$average")
      # shellcheck disable=SC2086  # the search's flags are words
      annotated-transformer evaluate --checkpoint "$runs/$name/last.pt" --split test2016 \
        $search --json --quiet > "$out/$name-test2016-$suffix.json"
    done
  done
done

echo "== 4. Table 3 rows, in the time left"
left=$(( budget_seconds - (SECONDS - started) ))
env RUNS_DIR="$runs/table3" RESULTS_DIR="$out/table3" DEADLINE=$(( $(date +%s) + left )) \
  "${table3[@]}" bash tools/table3_runs.sh
echo "== 5. §6.3's parser, 4 layers of 1,024"
env RUNS_DIR="$runs/parsing" RESULTS_DIR="$out/parsing" SYSTEMS=transformer-4x1024 SEEDS=1 \
  "${parsing[@]}" bash tools/parsing_runs.sh
echo "== done in $(( SECONDS - started )) s: $out"
