# Sourced by tools/tutorial.sh and tools/test.sh: make sure a Python environment with the project
# and its dev extras is active. Uses the active virtual environment if there is one, else ./.venv.
if [ -z "${VIRTUAL_ENV:-}" ]; then
  if [ ! -x .venv/bin/python ]; then
    echo "== creating the virtual environment .venv"
    "${PYTHON:-python3}" -m venv .venv
  fi
  . .venv/bin/activate
fi
# Pin torch before the project: the project asks for torch>=2.4, which on its own would let pip pick
# the newest (multi-GB CUDA) build. TORCH_SPEC chooses another build, e.g. TORCH_SPEC="torch==2.6.0".
if ! python -c "import torch" 2>/dev/null; then
  echo "== installing ${TORCH_SPEC:-torch==2.13.0}"
  python -m pip install --disable-pip-version-check "${TORCH_SPEC:-torch==2.13.0}"
fi
echo "== installing annotated-transformer with its dev extras"
python -m pip install --disable-pip-version-check -q -e ".[dev]"
