#!/usr/bin/env bash
# Every figure that needs a GPU, as independent steps of at most 8 minutes each on one H100, so that
# a GPU window of about 15 minutes (its start and retries included, 10 minutes a command) records
# one step and the next window goes on from there. Each call runs the first step not yet recorded,
# and only that one; commit what it writes to results/gpu/ (results/gpu/README.md says what is
# there).
#
# Once, here: `bash tools/gpu_wheels.sh` fetches into .whl/ (git-ignored) the wheels the GPU image
# lacks (spaCy, nltk, ...) and the two corpora. Then every window is the same device call, with
# carry [".whl"] and timeout_s 600:
#
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade
#     --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site &&
#   python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir -e . &&
#   bash tools/gpu_runs.sh; s=$?; tar czf "$OUT/gpu.tgz" results/gpu; exit $s
#
# (one line; the carried setuptools builds the editable install, as pyproject.toml needs >= 77), and
# back here `tar xzf FILES_AT/gpu.tgz` in the repository's root, then commit results/gpu/.
#
#   bash tools/gpu_runs.sh                  # the first step not yet recorded
#   bash tools/gpu_runs.sh --list           # each step, recorded or not
#   bash tools/gpu_runs.sh STEP [--again]   # that step (--again: forget its results, run it again)
#   bash tools/gpu_runs.sh --dry-run DIR    # the same at tiny sizes on a CPU, into DIR
#
# The steps, in order of value, each writing into the results folder:
# 1. machine+bench: machine.txt (the GPU, the driver, torch and CUDA) and bench_gpu_training.txt:
#    the paper's base model's training step, timed as Part 6 does (float32, bfloat16, eager and
#    compiled, the fused loss on and off, the nn.Transformer peer), each setting's MFU and our
#    fastest over the peer's (about 3 minutes).
# 2. subwords: Multi30k with one shared, tied vocabulary of 8,000 subwords, trained with --compile
#    --fused-loss: multi30k-subwords-train.txt (the log, seconds per epoch), -history.json and
#    test2016 sacreBLEU greedy and with beam 4 over the average of the last 5 epochs,
#    multi30k-subwords-test2016-{greedy,beam4-avg5}.json (about 4 minutes).
# 3. words: the same for the word-level run (spaCy's words), multi30k-words-*.
# 4. table3: Table 3's full-data rows (tools/table3_runs.sh) into table3/, as many as its deadline
#    lets start (a row is about 3 minutes); rows done are kept, so the next call continues, and the
#    step is recorded once every row is.
# 5. parser: §6.3's parser, 4 layers of width 1,024 (tools/parsing-4x1024.toml), trained on the Penn
#    Treebank sample by tools/parsing_runs.sh and scored on its test files, into parsing/.
#
# A step is recorded by STEP.done in the results folder (its date, seconds and GPU), written last
# and atomically; a recorded step is never run again without --again. Each step runs under
# `timeout` (BUDGET seconds, default 480): one stopped at its limit is not recorded, and the next
# call runs it again (a Multi30k run resumes from its checkpoint in runs/gpu/ when the machine is
# still the same one). Runs (checkpoints) go to runs/gpu/, which is not committed. The corpora:
# $MULTI30K_DIR and $TREEBANK_DIR, else .whl/multi30k and .whl/treebank where gpu_wheels.sh put
# them. The dry run (tests/test_gpu_runs.py) takes the same path through every step with sizes a
# CPU does in seconds, on whatever corpora those variables name.
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."

STEPS=(machine+bench subwords words table3 parser)
declare -A ABOUT=(
  [machine+bench]="the machine; the base model's training step: MFU, ratio to nn.Transformer's"
  [subwords]="Multi30k, 8,000 shared subwords, --compile --fused-loss: test2016 BLEU"
  [words]="Multi30k, spaCy's words, --compile --fused-loss: test2016 BLEU"
  [table3]="Table 3's full-data rows, as many as fit (resumable)"
  [parser]="§6.3's parser, 4 layers of 1,024, on the Penn Treebank sample"
)
USAGE="tools/gpu_runs.sh [--dry-run DIR] [--list] [STEP [--again]]"
refuse() {
  echo "tools/gpu_runs.sh: $*" >&2
  exit 2
}

dry=false
out=results/gpu
list=false
again=false
step=""
inside=""
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run)
      [ $# -ge 2 ] && [ -n "$2" ] && [ "${2#-}" = "$2" ] \
        || refuse "--dry-run needs a folder to write into (usage: $USAGE)"
      dry=true
      out=$2
      [ "${out#/}" != "$out" ] || out=$caller/$out  # from where it was called
      shift 2
      ;;
    --list) list=true; shift ;;
    --again) again=true; shift ;;
    --inside) inside=${2:?}; shift 2 ;;  # this script's own call: one step, under its limit
    -*) refuse "unknown argument '$1' (usage: $USAGE)" ;;
    *)
      [[ -v ABOUT[$1] ]] || refuse "unknown step '$1' (steps: ${STEPS[*]})"
      [ -z "$step" ] || refuse "one step at a time, not '$step' and '$1'"
      step=$1
      shift
      ;;
  esac
done
if $again && [ -z "$step" ]; then refuse "--again needs the STEP to run again"; fi
budget=${BUDGET:-480}
[[ $budget =~ ^[1-9][0-9]*$ ]] || refuse "BUDGET is a step's time limit in seconds, not '$budget'"

if $dry; then
  # threads that sleep while they wait: a busy CPU slows tiny models many times over otherwise
  export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
  runs=$out/runs
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
  runs=runs/gpu
  bench=()
  size=()
  fast=(--compile --fused-loss)
  subword_vocab=8000
  average=5
  table3=()
  parsing=(EPOCHS=40)
fi
# the corpora that gpu_wheels.sh carried, unless others are named
if [ -z "${MULTI30K_DIR:-}" ] && [ -d .whl/multi30k ]; then
  export MULTI30K_DIR=$PWD/.whl/multi30k
fi
if [ -z "${TREEBANK_DIR:-}" ] && [ -d .whl/treebank ]; then
  export TREEBANK_DIR=$PWD/.whl/treebank
fi

gpu_name() {
  nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep . \
    || echo "no GPU (dry run)"
}

step_machine_bench() {
  {
    date -u +%F
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null \
      || echo "no GPU (dry run)"
    python3 -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)"
  } > "$out/machine.txt"
  cat "$out/machine.txt"
  python3 benchmarks/bench_gpu_training.py "${bench[@]}" | tee "$out/bench_gpu_training.txt"
}

step_multi30k() {  # words or subwords
  local text=$1 name=multi30k-$1 search suffix
  local args=("${size[@]}" "${fast[@]}")
  [ "$text" = subwords ] && args+=(--vocab-size "$subword_vocab")
  if [ -f "$runs/$name/last.pt" ]; then args+=(--resume); fi
  echo "   train ${args[*]}"
  annotated-transformer train --out "$runs/$name" "${args[@]}" --quiet | tee "$out/$name-train.txt"
  cp "$runs/$name/history.json" "$out/$name-history.json"
  for search in "--beam 1" "--beam 4 --average-last $average"; do
    suffix=$([ "$search" = "--beam 1" ] && echo greedy || echo "beam4-avg$average")
    echo "   evaluate $search"
    # shellcheck disable=SC2086  # the search's flags are words
    annotated-transformer evaluate --checkpoint "$runs/$name/last.pt" --split test2016 \
      $search --json --quiet > "$out/$name-test2016-$suffix.json"
  done
}

step_table3() {  # exit 75 (EX_TEMPFAIL): rows left for the next call
  local log=$runs/table3.log
  mkdir -p "$runs"
  # no row starts unless ROW_SECONDS (table3_runs.sh's, 180) fit before the step's time limit
  env RUNS_DIR="$runs/table3" RESULTS_DIR="$out/table3" DEADLINE=$((STEP_DEADLINE - 20)) \
    "${table3[@]}" bash tools/table3_runs.sh | tee "$log"
  if grep -q "no time left" "$log"; then exit 75; fi
}

step_parser() {
  env RUNS_DIR="$runs/parsing" RESULTS_DIR="$out/parsing" SYSTEMS=transformer-4x1024 SEEDS=1 \
    "${parsing[@]}" bash tools/parsing_runs.sh
}

if [ -n "$inside" ]; then
  mkdir -p "$out" "$runs"
  case $inside in
    machine+bench) step_machine_bench ;;
    subwords | words) step_multi30k "$inside" ;;
    table3) step_table3 ;;
    parser) step_parser ;;
  esac
  exit 0
fi

recorded() { [ -f "$out/$1.done" ]; }
number() {
  local i
  for i in "${!STEPS[@]}"; do [ "${STEPS[$i]}" != "$1" ] || echo $((i + 1)); done
}
if $list; then
  for s in "${STEPS[@]}"; do
    if recorded "$s"; then
      state="recorded ($(head -1 "$out/$s.done"))"
    else
      state="not recorded"
      if [ "$s" = table3 ] && compgen -G "$out/table3/*-val-beam4.json" > /dev/null; then
        state+=", $(ls "$out"/table3/*-val-beam4.json | wc -l) rows so far"
      fi
    fi
    printf '%s. %-14s %s: %s\n' "$(number "$s")" "$s" "$state" "${ABOUT[$s]}"
  done
  exit 0
fi

if [ -z "$step" ]; then
  for s in "${STEPS[@]}"; do
    if ! recorded "$s"; then step=$s; break; fi
  done
  if [ -z "$step" ]; then
    echo "== all ${#STEPS[@]} steps are recorded in $out: nothing to run" \
      "(--list shows them; STEP --again runs one again)"
    exit 0
  fi
elif recorded "$step" && ! $again; then
  refuse "$step is recorded ($out/$step.done); add --again to forget it and run it again"
fi
if ! $dry && ! python3 -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
  refuse "no GPU here; use --dry-run DIR to check the script on a CPU"
fi
# the console scripts beside python3, and `python` as python3 for the scripts that call it
shim=$(mktemp -d)
trap 'rm -rf "$shim"' EXIT
printf '#!/bin/sh\nexec "%s" "$@"\n' "$(command -v python3)" > "$shim/python"  # a link: no venv
chmod +x "$shim/python"
PATH="$shim:$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
export PATH
command -v annotated-transformer > /dev/null \
  || refuse "annotated-transformer is not installed (this script's header says how)"
if ! $dry && [ "$step" != machine+bench ] && [ "$step" != parser ] && [ -z "${MULTI30K_DIR:-}" ] \
  && [ ! -f "${XDG_CACHE_HOME:-$HOME/.cache}/annotated-transformer/multi30k/train.de.gz" ]; then
  refuse "no Multi30k here: bash tools/gpu_wheels.sh carries it in .whl/, or set MULTI30K_DIR"
fi

if $again; then  # forget the step's results and its runs
  case $step in
    machine+bench) rm -f "$out/machine.txt" "$out/bench_gpu_training.txt" ;;
    subwords | words) rm -rf "$out/multi30k-$step-"* "$runs/multi30k-$step" ;;
    table3) rm -rf "$out/table3" "$runs/table3" ;;
    parser) rm -rf "$out/parsing" "$runs/parsing" ;;
  esac
  rm -f "$out/$step.done"
fi

mkdir -p "$out"
echo "== $(number "$step"). $step: ${ABOUT[$step]} (at most $budget s)"
started=$SECONDS
export STEP_DEADLINE=$(($(date +%s) + budget))
dry_args=()
if $dry; then dry_args=(--dry-run "$out"); fi
status=0
timeout -k 20 "$budget" bash tools/gpu_runs.sh "${dry_args[@]}" --inside "$step" || status=$?
seconds=$((SECONDS - started))
case $status in
  0)
    echo "$(date -u +%F), $seconds s, $(gpu_name)" > "$out/.$step.done.tmp"
    mv "$out/.$step.done.tmp" "$out/$step.done"
    echo "== $step: recorded in $out/$step.done ($seconds s)"
    ;;
  75)
    echo "== $step: stopped before its time limit with work left ($seconds s); not recorded yet," \
      "the next call continues it"
    ;;
  124 | 137)
    echo "tools/gpu_runs.sh: $step stopped at its time limit, $budget s (BUDGET); not recorded" \
      >&2
    exit 124
    ;;
  *)
    echo "tools/gpu_runs.sh: $step failed (exit $status) after $seconds s; not recorded" >&2
    exit "$status"
    ;;
esac
