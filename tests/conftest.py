"""Shared fixtures: a few hundred synthetic German-English pairs written as Multi30k-named .gz files.

Tests that train pass the folder as --data-dir (or read it with load_multi30k): no network and no ../shared needed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from synthetic import synthetic_pairs, write_split


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("MULTI30K_DIR", raising=False)
    pairs = synthetic_pairs()
    folder = tmp_path / "multi30k"
    folder.mkdir()
    write_split(folder, "train", pairs[:160])
    write_split(folder, "val", pairs[160:176])
    write_split(folder, "test2016", pairs[176:])
    return folder
