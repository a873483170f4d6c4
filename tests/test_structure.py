"""The package's structure as the project keeps it: small functions, small exported cells."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_no_function_over_60_lines_and_no_exported_cell_over_50() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "structure.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout


def test_the_check_counts_a_function_s_lines(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import structure
    finally:
        sys.path.pop(0)
    (tmp_path / "long.py").write_text("def f():\n" + "    x = 1\n" * 70)
    assert structure.functions(tmp_path / "long.py") == [(71, "long.f")]
