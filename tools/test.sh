#!/usr/bin/env bash
# The whole test suite: the package and README agree with the notebooks, every notebook's checks
# pass (nbdev-test, slow cells skipped), the tutorial renders (every cell run), and the pytest suite
# in tests/ passes, its browser test on the tutorial just rendered.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/setup.sh

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

echo "== nbdev-test: every notebook, top to bottom, without the cells flagged slow"
nbdev-test --n-workers 2

echo "== the main job: every notebook executed top to bottom (slow cells too) and rendered to test-artifacts/tutorial"
python tools/render.py --out test-artifacts/tutorial

echo "== pytest (the browser test reads the tutorial just rendered)"
TUTORIAL_DIR=test-artifacts/tutorial python -m pytest
