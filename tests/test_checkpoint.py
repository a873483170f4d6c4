"""Tests for annotated_transformer.checkpoint (Part 5.1).

1. Checkpoint averaging: copies give the checkpoint, two give the mean, dtypes and non-float buffers,
   mismatched checkpoints refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from annotated_transformer.checkpoint import average_checkpoints
from annotated_transformer.model import ModelConfig


# =========================================================================== 1. averaging
def save_states(tmp_path: Path, n: int, seed: int = 0) -> list[Path]:
    "n checkpoints of small random models, each a dictionary with the state dict under 'model', as train writes."
    paths = []
    for i in range(n):
        torch.manual_seed(seed + i)
        state = ModelConfig(N=1, d_model=16, d_ff=32, h=2).build(7, 7).state_dict()
        paths.append(tmp_path / f"c{i}.pt")
        torch.save({"model": state, "epoch": i + 1, "config": {"N": 1}}, paths[-1])
    return paths


def test_averaging_copies_of_one_checkpoint_gives_it_back(tmp_path: Path) -> None:
    [path] = save_states(tmp_path, 1)
    state = torch.load(path, weights_only=True)["model"]
    averaged = average_checkpoints([path, path, path])
    assert averaged.keys() == state.keys()
    for k, v in state.items():
        torch.testing.assert_close(averaged[k], v, atol=1e-6, rtol=0)


def test_averaging_two_gives_their_mean_and_keeps_dtypes(tmp_path: Path) -> None:
    paths = save_states(tmp_path, 2)
    a, b = (torch.load(p, weights_only=True)["model"] for p in paths)
    averaged = average_checkpoints(paths)
    for k in a:
        torch.testing.assert_close(averaged[k], (a[k] + b[k]) / 2)
    # a plain state dict works too; half precision is averaged in float32 and cast back; integers come from the last
    half = [{"w": torch.tensor([1.0, 2.0], dtype=torch.float16), "n": torch.tensor(i)} for i in (3, 7)]
    for i, state in enumerate(half):
        torch.save(state, tmp_path / f"h{i}.pt")
    mixed = average_checkpoints([tmp_path / "h0.pt", tmp_path / "h1.pt"])
    assert mixed["w"].dtype == torch.float16 and mixed["n"].item() == 7


def test_averaging_refuses_mismatched_checkpoints(tmp_path: Path) -> None:
    [path] = save_states(tmp_path, 1)
    torch.save(ModelConfig(N=1, d_model=16, d_ff=32, h=2).build(9, 7).state_dict(), tmp_path / "other.pt")
    with pytest.raises(ValueError, match=r"'src_embed.0.lut.weight' is \(9, 16\)"):
        average_checkpoints([path, tmp_path / "other.pt"])
    torch.save(ModelConfig(N=2, d_model=16, d_ff=32, h=2).build(7, 7).state_dict(), tmp_path / "deeper.pt")
    with pytest.raises(ValueError, match="different parameters"):
        average_checkpoints([path, tmp_path / "deeper.pt"])
    torch.save([1, 2, 3], tmp_path / "list.pt")
    with pytest.raises(ValueError, match="neither a state dict"):
        average_checkpoints([tmp_path / "list.pt"])
    with pytest.raises(ValueError, match="no checkpoints"):
        average_checkpoints([])
