#!/usr/bin/env bash
# The main job: set up, train the chapters' CPU run if unfinished (outside any cell), execute every
# notebook top to bottom (slow cells included) and render the tutorial to HTML in _docs/. Extra
# arguments go to tools/render.py (see --help), e.g. `--timings cells.tsv` for each cell's seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/setup.sh
python tools/render.py "$@"
