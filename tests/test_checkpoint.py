"""Tests for annotated_transformer.checkpoint (Part 5.1).

1. Checkpoint averaging: copies give the checkpoint, two give the mean, dtypes and non-float buffers,
   mismatched checkpoints refused.
2. Safety and consistency: a planted pickle payload is refused and never runs, temporary files are
   unique, inconsistent checkpoints get clear errors, epochs of another run are not averaged.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from annotated_transformer._chapters import synthetic_pairs
from annotated_transformer.checkpoint import (
    CHECKPOINT_FORMAT,
    average_checkpoints,
    average_last,
    load_checkpoint,
    model_from_checkpoint,
    save_checkpoint,
)
from annotated_transformer.model import ModelConfig
from annotated_transformer.trainer import TrainConfig, train


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
    half = [
        {"w": torch.tensor([1.0, 2.0], dtype=torch.float16), "n": torch.tensor(i)} for i in (3, 7)
    ]
    for i, state in enumerate(half):
        torch.save(state, tmp_path / f"h{i}.pt")
    mixed = average_checkpoints([tmp_path / "h0.pt", tmp_path / "h1.pt"])
    assert mixed["w"].dtype == torch.float16 and mixed["n"].item() == 7


def test_averaging_refuses_mismatched_checkpoints(tmp_path: Path) -> None:
    [path] = save_states(tmp_path, 1)
    torch.save(
        ModelConfig(N=1, d_model=16, d_ff=32, h=2).build(9, 7).state_dict(), tmp_path / "other.pt"
    )
    with pytest.raises(ValueError, match=r"'src_embed.0.lut.weight' is \(9, 16\)"):
        average_checkpoints([path, tmp_path / "other.pt"])
    torch.save(
        ModelConfig(N=2, d_model=16, d_ff=32, h=2).build(7, 7).state_dict(), tmp_path / "deeper.pt"
    )
    with pytest.raises(ValueError, match="different parameters"):
        average_checkpoints([path, tmp_path / "deeper.pt"])
    torch.save([1, 2, 3], tmp_path / "list.pt")
    with pytest.raises(ValueError, match="neither a state dict"):
        average_checkpoints([tmp_path / "list.pt"])
    with pytest.raises(ValueError, match="no checkpoints"):
        average_checkpoints([])


# =========================================================================== 2. safety and consistency
class Payload:
    "Unpickling this calls Path.touch(marker): what an attacker's os.system would do, harmlessly."

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def tiny_run(out: Path, seed: int = 0, epochs: int = 2) -> Path:
    "A two-epoch run of a tiny model on synthetic pairs; its last.pt."
    pairs = synthetic_pairs()
    config = TrainConfig(
        model=ModelConfig(N=1, d_model=16, d_ff=32, h=2),
        epochs=epochs,
        max_tokens=300,
        warmup=10,
        seed=seed,
    )
    train(
        out,
        config,
        pairs={"train": pairs[:150], "val": pairs[150:160]},
        progress=False,
        log=lambda _: None,
    )
    return out / "last.pt"


def test_a_planted_payload_is_refused_and_never_runs(tmp_path: Path) -> None:
    last = tiny_run(tmp_path / "run", epochs=1)
    ckpt = torch.load(last, weights_only=True)
    marker = tmp_path / "payload-ran"
    ckpt["history"][0]["note"] = Payload(marker)  # hidden where nobody looks
    torch.save(ckpt, tmp_path / "planted.pt")
    with pytest.raises(
        ValueError, match=r"planted.pt asks to build the Python object .*refusing to load it"
    ):
        load_checkpoint(tmp_path / "planted.pt")
    assert not marker.exists()
    torch.save({"model": ckpt["model"], "extra": Payload(marker)}, tmp_path / "weights.pt")
    with pytest.raises(
        ValueError, match="weights.pt asks to build the Python object"
    ):  # averaging loads safely too
        average_checkpoints([tmp_path / "weights.pt"])
    assert not marker.exists()


def test_everything_the_trainer_saves_loads_with_the_restricted_unpickler(tmp_path: Path) -> None:
    last = tiny_run(tmp_path / "run")
    for path in (last, tmp_path / "run" / "epoch1.pt"):
        ckpt = torch.load(
            path, weights_only=True
        )  # raises if anything but tensors and plain data was saved
        assert ckpt["format"] == CHECKPOINT_FORMAT and ckpt["run_id"]


def test_temporary_files_are_unique(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = []
    real_replace = os.replace

    def recording_replace(src, dst):
        names.append(Path(src).name)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", recording_replace)
    save_checkpoint(tmp_path / "last.pt", epoch=1)
    save_checkpoint(tmp_path / "last.pt", epoch=2)
    assert len(set(names)) == 2, names  # two writers of last.pt never share a temporary file
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def test_checkpoints_get_the_permissions_of_any_new_file(tmp_path: Path) -> None:
    "Not mkstemp's owner-only 0600: a checkpoint is shared like any file the user writes (the umask decides)."
    umask = os.umask(0o022)
    try:
        save_checkpoint(tmp_path / "last.pt", epoch=1)
        (tmp_path / "plain").write_bytes(b"")
    finally:
        os.umask(umask)
    assert (
        (tmp_path / "last.pt").stat().st_mode & 0o777
        == (tmp_path / "plain").stat().st_mode & 0o777
        == 0o644
    )


def test_inconsistent_checkpoints_get_clear_errors(tmp_path: Path) -> None:
    ckpt = load_checkpoint(tiny_run(tmp_path / "run", epochs=1))
    wrong_size = {
        **ckpt,
        "config": {**ckpt["config"], "model": {**ckpt["config"]["model"], "d_model": 32}},
    }
    with pytest.raises(
        ValueError, match="last.pt: its weights do not fit its model configuration .*size mismatch"
    ):
        model_from_checkpoint(wrong_size, "last.pt")
    unknown_key = {
        **ckpt,
        "config": {**ckpt["config"], "model": {**ckpt["config"]["model"], "heads": 8}},
    }
    with pytest.raises(ValueError, match="cannot use .*unexpected keyword argument 'heads'"):
        model_from_checkpoint(unknown_key, "last.pt")
    no_vocab = {k: v for k, v in ckpt.items() if k != "tgt_vocab"}
    with pytest.raises(ValueError, match="last.pt has no tgt_vocab"):
        model_from_checkpoint(no_vocab, "last.pt")


def test_average_last_refuses_the_epochs_of_another_run(tmp_path: Path) -> None:
    last = tiny_run(tmp_path / "a", seed=0)
    other = tiny_run(tmp_path / "b", seed=1)
    assert average_last(last, 2)["epoch"] == 2  # one run's epochs average
    (tmp_path / "a" / "epoch1.pt").write_bytes((other.parent / "epoch1.pt").read_bytes())
    with pytest.raises(ValueError, match="epoch1.pt is from another training run than .*last.pt"):
        average_last(last, 2)
