#!/usr/bin/env bash
# The whole test suite: the package and README agree with the notebooks, every notebook's checks
# pass (nbdev-test, slow cells skipped), the tutorial renders (every cell run), and the pytest suite
# in tests/ passes, its browser test on the tutorial just rendered. It holds on a busy machine: the
# chapters' CPU run is trained once, first, outside any cell (so nbdev-test only reads it), no cell
# should take over about two minutes, and the ten slowest cells and tests are printed to show it.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/setup.sh
# PyTorch's OpenMP threads spin while they wait for each other; when another process holds a core,
# every small operation waits for a thread that is not running (a copy-task epoch measured 40x
# slower beside one busy loop). Passive threads sleep instead: about 25% slower on an idle machine
# for tiny models, and no collapse on a busy one.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"

echo "== nbdev-export, nbdev-clean and tools/readme.py leave the working tree as it was"
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

echo "== ruff: every code line within 100 columns, and formatted"
# The notebooks are the source of the exported modules; the rest of the package is written by hand.
sources=(nbs tests tools benchmarks annotated_transformer/{cli,_chapters}.py)
ruff check "${sources[@]}"
ruff format --check "${sources[@]}"

echo "== the chapters' CPU run (runs/multi30k-cpu, which chapters 07 and 08 decode), trained if unfinished"
python tools/render.py --prepare-run

echo "== nbdev-test: every notebook, top to bottom, without the cells flagged slow (cells over 60 s named)"
nbdev-test --n-workers 2 --timing --cell-timing-min 60

echo "== the main job: every notebook executed top to bottom (slow cells too) and rendered to test-artifacts/tutorial"
timings=test-artifacts/cell-timings.tsv
python tools/render.py --out test-artifacts/tutorial --timings "$timings"
echo "== the ten slowest cells of the main job (all of them in $timings)"
head -n 11 "$timings"

echo "== pytest (the browser test reads the tutorial just rendered), and its ten slowest tests"
TUTORIAL_DIR=test-artifacts/tutorial python -m pytest --durations=10
