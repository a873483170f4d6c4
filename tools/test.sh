#!/usr/bin/env bash
# The whole test suite: the package and README agree with the notebooks, Part I's checks pass on
# other arithmetic too (PyTorch's non-vectorized kernels, one thread), the tutorial renders (every
# cell of every notebook run, its checks included), and the pytest suite in tests/ passes, its
# browser test on the tutorial just rendered. It holds on a busy machine: the chapters' CPU runs are
# trained once, first, outside any cell (so the notebooks only read them), no cell should take over
# about two minutes, and the ten slowest cells and tests are printed to show it.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/setup.sh
# PyTorch's OpenMP threads spin while they wait for each other; when another process holds a core,
# every small operation waits for a thread that is not running (a copy-task epoch measured 40x
# slower beside one busy loop). Passive threads sleep instead: about 25% slower on an idle machine
# for tiny models, and no collapse on a busy one.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"

# Each step says how long the one before it took, and the last line the total (bash's SECONDS).
step() {
  if [ -n "${step_started:-}" ]; then echo "   (that step: $((SECONDS - step_started)) s)"; fi
  step_started=$SECONDS
  echo "== $*"
}

step "nbdev-export, nbdev-clean and tools/readme.py leave the working tree as it was"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  snapshot() { { git status --porcelain; git diff; } | sha256sum; }
  before=$(snapshot)
  nbdev-export
  nbdev-clean
  python tools/readme.py
  if [ "$(snapshot)" != "$before" ]; then
    echo "FAIL: the exported package, the cleaned notebooks or README.md differ from the notebooks:" >&2
    git status --porcelain >&2
    git diff --stat >&2
    exit 1
  fi
else
  echo "(not a git checkout: skipped)"
fi

step "ruff: every code line within 100 columns, and formatted"
# The notebooks are the source of the exported modules; the rest of the package is written by hand.
sources=(nbs tests tools benchmarks annotated_transformer/{cli,_chapters}.py)
ruff check "${sources[@]}"
ruff format --check "${sources[@]}"

step "the chapters' CPU runs (runs/multi30k-cpu, runs/multi30k-subwords-cpu), trained if unfinished"
python tools/render.py --prepare-run

# A float computed here may differ in its last bits on another processor (AVX2 or AVX-512, Intel or
# AMD) or thread count: every check compares such floats within a tolerance. Part I's chapters and
# the tests of its modules run once more on PyTorch's plain C++ kernels and one thread, the
# arithmetic furthest from the vectorized kernels the rest of the suite runs on.
step "other arithmetic: Part I (nbdev-test, slow cells skipped) and its modules' tests, ATEN_CPU_CAPABILITY=default, one thread"
part_one='^0[1-8]_'  # tools/prose.py's PART_I
numeric=(tests/test_{model,batching,training,losses,decoding}.py)
export ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1
nbdev-test --n-workers 2 --file-re "$part_one" --timing --cell-timing-min 60
python -m pytest -q -n 2 --dist loadfile "${numeric[@]}"
unset ATEN_CPU_CAPABILITY OMP_NUM_THREADS

# The main job below runs every cell of every notebook; nbdev-test adds the notebooks that have
# slow cells, run without them as a reader who skips them would (Part I's ran above).
slow=$(grep -l '"#| slow' nbs/[0-9]*.ipynb | xargs -n1 basename | grep -Ev "$part_one" | paste -sd'|')
step "nbdev-test: the other chapters with cells flagged slow (${slow:-none}), run without them"
if [ -n "$slow" ]; then
  nbdev-test --n-workers 2 --file-re "^($slow)\$" --timing --cell-timing-min 60
fi

step "the main job: every notebook executed top to bottom (slow cells too) and rendered to test-artifacts/tutorial"
timings=test-artifacts/cell-timings.tsv
python tools/render.py --out test-artifacts/tutorial --timings "$timings"
step "the ten slowest cells of the main job (all of them in $timings)"
head -n 11 "$timings"

step "pytest (the browser test reads the tutorial just rendered), and its ten slowest tests"
TUTORIAL_DIR=test-artifacts/tutorial python -m pytest -n 2 --dist loadfile --durations=10
step "done in $SECONDS s"
