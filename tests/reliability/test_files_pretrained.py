"""Model folders of others for `--checkpoint hf:FOLDER`: whatever damage makes transformers raise
(a configuration of the wrong type or size, weights that do not fit it, a truncated or missing
weights file, a pickle, a damaged tokenizer or generation settings, a model's own code) is refused
in one line naming the part, before a weight is used; an index that names weights outside the
folder, or a link, FIFO or device, is refused before transformers reads it; nothing of a pickle
runs; a folder that loads writes nothing to standard error when it is not a terminal (no load
report, no bar)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
from clitools import refused
from safetensors.torch import load_file, save_file
from transformers.utils import logging

from annotated_transformer._chapters import opus_like_folder, sampled_pairs
from annotated_transformer.cli import main


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    "A small folder shaped like OPUS-MT's, as transformers writes it."
    return opus_like_folder(tmp_path_factory.mktemp("hf") / "good", sampled_pairs(200, seed=1))


def set_config(**fields):
    "A damage: these fields of config.json changed."

    def damage(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, **fields}))

    return damage


def write(name: str, text: str):
    "A damage: the file `name` replaced by `text`."
    return lambda folder: (folder / name).write_text(text)


def weights(change):
    "A damage: model.safetensors rewritten after `change(tensors)`."

    def damage(folder: Path) -> None:
        tensors = load_file(folder / "model.safetensors")
        change(tensors)
        save_file(tensors, folder / "model.safetensors")

    return damage


def truncated(folder: Path) -> None:
    "model.safetensors cut to its first kilobyte."
    path = folder / "model.safetensors"
    path.write_bytes(path.read_bytes()[:1000])


def replaced_by(make):
    "A damage: model.safetensors replaced by what `make(path)` puts there."

    def damage(folder: Path) -> None:
        (folder / "model.safetensors").unlink()
        make(folder / "model.safetensors")

    return damage


class Payload:
    "A pickle that would create a file if it were ever run."

    def __init__(self, witness: Path):
        self.witness = witness

    def __reduce__(self):
        return (Path.touch, (self.witness,))


def pickled(folder: Path) -> None:
    "Weights as a pickle with a payload, and no safetensors file."
    (folder / "model.safetensors").unlink()
    with open(folder / "pytorch_model.bin", "wb") as f:
        pickle.dump(Payload(folder.parent / "RAN"), f)


def indexed(shard: str, make=None):
    """A damage: the weights moved out of the folder, and an index that names `shard` for every
    tensor (`make(path)` puts something at the shard's path in the folder first)."""

    def damage(folder: Path) -> None:
        (folder.parent / "other").mkdir(exist_ok=True)
        keys = list(load_file(folder / "model.safetensors"))
        os.replace(folder / "model.safetensors", folder.parent / "other" / "model.safetensors")
        if make:
            make(folder / shard)
        index = {"metadata": {}, "weight_map": dict.fromkeys(keys, shard)}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))

    return damage


def drop(key: str):
    "A change of the weights: `key` removed."
    return lambda tensors: tensors.pop(key)


CASES = [  # (name, damage, what the line says)
    ("config.json not JSON", write("config.json", "{not json"), "cannot load its config.json"),
    ("d_model a string", set_config(d_model="abc"), "Field 'd_model' expected int"),
    ("vocab_size negative", set_config(vocab_size=-5), "src_vocab must be from 1"),
    ("positions 10**9", set_config(max_position_embeddings=10**9), "max_len must be from 1"),
    ("layers unequal", set_config(decoder_layers=3), "its encoder and decoder differ in size"),
    (
        "weights of another width",
        set_config(d_model=128, encoder_ffn_dim=512, decoder_ffn_dim=512),
        "cannot load its weights: they do not fit its config.json",
    ),
    (
        "a weight missing",
        weights(drop("model.encoder.layers.0.fc1.weight")),
        "model.encoder.layers.0.fc1.weight is missing",
    ),
    ("weights truncated", truncated, "cannot load its weights (Error while deserializing"),
    ("weights /dev/zero", replaced_by(lambda p: p.symlink_to("/dev/zero")), "its weights"),
    ("weights a FIFO", replaced_by(os.mkfifo), "cannot load its weights"),
    ("weights a pickle", pickled, "holds more than tensors; nothing of it was run"),
    (  # round four: an index may name files only inside the folder, plain ones
        "index names ../",
        indexed("../other/model.safetensors"),
        "names '../other/model.safetensors', not a file of the folder",
    ),
    (
        "bans the id 10**9",
        write("generation_config.json", json.dumps({"bad_words_ids": [[10**9]]})),
        "cannot load its generation_config.json (bad_words_ids holds 1000000000",
    ),
    (
        "bans a string",
        write("generation_config.json", json.dumps({"bad_words_ids": [["x"]]})),
        "cannot load its generation_config.json (bad_words_ids holds 'x'",
    ),
    (
        "a tokenizer file of 65 MiB",
        write("vocab.json", " " * (2**26 + 2**20)),
        "cannot load its tokenizer (vocab.json has 68,157,440 bytes, over the 67,108,864",
    ),
    (
        "index a list, not a table",
        lambda folder: (folder / "model.safetensors.index.json").write_text("[1, 2]"),
        "model.safetensors.index.json names None, not a file of the folder",
    ),
    ("index names /dev/zero", indexed("/dev/zero"), "names '/dev/zero', not a file of the folder"),
    (
        "index names a link",
        indexed("shard.safetensors", lambda p: p.symlink_to(p.parent.parent / "other" / "x")),
        "shard.safetensors is not a plain file of the folder",
    ),
    ("source.spm damaged", write("source.spm", "garbage"), "cannot load its tokenizer"),
    ("vocab.json damaged", write("vocab.json", "[1,2"), "cannot load its tokenizer"),
    (
        "generation settings damaged",
        write("generation_config.json", "[1,2"),
        "cannot load its generation_config.json",
    ),
    (
        "a model's own code",
        set_config(model_type="mine", auto_map={"AutoConfig": "mine.Config"}),
        "cannot load its config.json",
    ),
]


@pytest.mark.parametrize("name, damage, says", CASES, ids=[c[0] for c in CASES])
def test_a_damaged_folder_is_refused_in_one_line(
    name: str, damage, says: str, good: Path, tmp_path: Path, capsys
) -> None:
    folder = Path(shutil.copytree(good, tmp_path / "model"))
    damage(folder)
    line = refused(["translate", "--checkpoint", f"hf:{folder}", "Ein Mann."], 1, capsys)
    assert f"hf:{folder}: cannot" in line and says in line, line
    assert not (tmp_path / "RAN").exists()


def test_a_folder_that_loads_writes_nothing_to_stderr(good: Path, capsys) -> None:
    settings = logging.get_verbosity(), logging.is_progress_bar_enabled()
    assert main(["translate", "--checkpoint", f"hf:{good}", "Ein Mann."]) == 0
    out, err = capsys.readouterr()
    assert out.strip() and err == "", err
    assert (logging.get_verbosity(), logging.is_progress_bar_enabled()) == settings  # as they were
