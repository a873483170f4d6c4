"""Exported folders from others: every file the reader reads is checked before CTranslate2 or
sentencepiece sees it (damaged, empty, oversized, of the wrong type, nested too deep, a link or a
special file), and each refusal is one line naming the file; export refuses what it could not
write back, and --overwrite never deletes a file export did not write."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from clitools import environment, one_error_line

from annotated_transformer.checkpoint import RunCheckpoint, save_checkpoint
from annotated_transformer.cli import main
from annotated_transformer.config import TrainConfig, run_model
from annotated_transformer.data import SPECIALS, Vocab
from annotated_transformer.engines import INFO_FILE, export_model, load_translator

WORDS = ["Ein", "Hund", "läuft", ".", "A", "dog", "runs"]


def tiny_run_checkpoint(tokens: list = WORDS) -> RunCheckpoint:
    "An untrained tiny Transformer's checkpoint (fast: nothing trains)."
    config, vocab = TrainConfig(model=run_model("tiny")), Vocab([*SPECIALS, *tokens])
    torch.manual_seed(0)
    model = config.model.build(len(vocab), len(vocab))
    return RunCheckpoint(config, model.state_dict(), vocab, vocab, 1, [], "run", None)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    "The tiny checkpoint exported through the command."
    work = tmp_path_factory.mktemp("export")
    save_checkpoint(work / "last.pt", tiny_run_checkpoint())
    out = work / "model"
    assert main(["export", "--checkpoint", str(work / "last.pt"), "--out", str(out)]) == 0
    return out


@pytest.fixture
def folder(exported: Path, tmp_path: Path) -> Path:
    "A copy of the exported folder, for a test to damage."
    return Path(shutil.copytree(exported, tmp_path / "model"))


def refused_line(folder: Path, capsys, *flags: str) -> str:
    "translate on `folder`: exit 1, nothing printed, one line that is neither a crash nor a hang."
    capsys.readouterr()
    status = main(["translate", "--checkpoint", str(folder), *flags, "Ein Hund läuft ."])
    out, err = capsys.readouterr()
    line = one_error_line(err, "translate")
    assert status == 1 and out == "", (status, out)
    assert "Traceback" not in err and "internal error" not in line, line
    return line


# ------------------------------------------------------------------ damaged files, one case a row
def write(name: str, content: str | bytes):
    "A mutation: `name` gets `content`."
    data = content.encode("utf-8", "surrogatepass") if isinstance(content, str) else content
    return lambda folder: (folder / name).write_bytes(data)


def edit(name: str, change):
    "A mutation: `name`'s JSON becomes change(JSON)."

    def mutate(folder: Path) -> None:
        value = change(json.loads((folder / name).read_text()))
        (folder / name).write_text(json.dumps(value))

    return mutate


def grow(name: str, size: int):
    "A mutation: `name` becomes `size` bytes long (a sparse file: nothing written)."
    return lambda folder: os.truncate(folder / name, size)


def cut(name: str, keep: float | int):
    "A mutation: `name` keeps its first `keep` bytes (a float: that part of them)."

    def mutate(folder: Path) -> None:
        data = (folder / name).read_bytes()
        (folder / name).write_bytes(data[: int(len(data) * keep) if type(keep) is float else keep])

    return mutate


def patch_bytes(name: str, at: int, new: bytes):
    "A mutation: bytes of `name` from `at` replaced with `new`."

    def mutate(folder: Path) -> None:
        data = bytearray((folder / name).read_bytes())
        data[at : at + len(new)] = new
        (folder / name).write_bytes(bytes(data))

    return mutate


VOCAB, CONFIG, MODEL = "shared_vocabulary.json", "config.json", "model.bin"
without = lambda key: edit(INFO_FILE, lambda d: {k: v for k, v in d.items() if k != key})
setting = lambda key, value: edit(INFO_FILE, lambda d: {**d, key: value})
DAMAGED = {  # id: (file named in the error, mutation, what the error says)
    "model.bin empty": (MODEL, write(MODEL, b""), "is empty"),
    "model.bin truncated": (MODEL, cut(MODEL, 0.5), "does not fit its bytes"),
    "model.bin header only": (MODEL, cut(MODEL, 24), "ends early"),
    "model.bin cut in a name": (MODEL, cut(MODEL, 44), "has a damaged name"),
    "model.bin random bytes": (MODEL, write(MODEL, os.urandom(4096)), "binary version"),
    "model.bin oversized": (MODEL, grow(MODEL, 3 * 2**30), "bytes, over"),
    "model.bin trailing bytes": (MODEL, lambda f: open(f / MODEL, "ab").write(b"x" * 9), "after"),
    "model.bin version 99": (MODEL, patch_bytes(MODEL, 0, b"\x63\0\0\0"), "binary version 99"),
    "model.bin huge count": (MODEL, patch_bytes(MODEL, 26, b"\xff\xff\xff\xff"), "variables"),
    "config.json empty": (CONFIG, write(CONFIG, b""), "is empty"),
    "config.json not JSON": (CONFIG, write(CONFIG, "{bos"), "not readable JSON"),
    "config.json a list": (CONFIG, write(CONFIG, "[]"), "holds a list"),
    "config.json bos a number": (CONFIG, edit(CONFIG, lambda d: {**d, "bos_token": 3}), "bos"),
    "config.json no unk": (CONFIG, edit(CONFIG, lambda d: d.pop("unk_token") and d), "missing"),
    "config.json oversized": (CONFIG, grow(CONFIG, 2**21), "bytes, over"),
    "config.json nested deep": (CONFIG, write(CONFIG, "[" * 100_000), "nests too deep"),
    "vocabulary empty": (VOCAB, write(VOCAB, b""), "is empty"),
    "vocabulary not JSON": (VOCAB, write(VOCAB, b"\xff\xfe"), "not readable JSON"),
    "vocabulary a table": (VOCAB, write(VOCAB, "{}"), "holds a dict"),
    "vocabulary a number": (VOCAB, edit(VOCAB, lambda v: [*v[:5], 7, *v[6:]]), "token 5 is 7"),
    "vocabulary lone surrogate": (VOCAB, edit(VOCAB, lambda v: [*v, "\ud800"]), "token 11"),
    "vocabulary no specials": (VOCAB, edit(VOCAB, lambda v: v[4:]), "special tokens"),
    "vocabulary a token twice": (VOCAB, edit(VOCAB, lambda v: [*v[:-1], v[4]]), "twice"),
    "vocabulary longer": (MODEL, edit(VOCAB, lambda v: [*v, "extra"]), "(11, 64); the vocab"),
    "vocabulary oversized": (VOCAB, grow(VOCAB, 65 * 2**20), "bytes, over"),
    "info a list": (INFO_FILE, write(INFO_FILE, "[]"), "holds a list"),
    "info empty": (INFO_FILE, write(INFO_FILE, b""), "is empty"),
    "info nested deep": (INFO_FILE, write(INFO_FILE, '{"a":' * 100_000), "nests too deep"),
    "info no config": (INFO_FILE, without("config"), "'config' is missing"),
    "info no tokenizer": (INFO_FILE, without("tokenizer"), "'tokenizer' is missing"),
    "info no parameters": (INFO_FILE, without("parameters"), "'parameters' is missing"),
    "info format 2": (INFO_FILE, setting("format", 2), "'format' is 2"),
    "info parameters text": (INFO_FILE, setting("parameters", "abc"), "'parameters' is 'abc'"),
    "info parameters true": (INFO_FILE, setting("parameters", True), "'parameters' is True"),
    "info quantization int4": (INFO_FILE, setting("quantization", "int4"), "'quantization'"),
    "info tokenizer a number": (INFO_FILE, setting("tokenizer", 5), "'tokenizer' is 5"),
    "info config a string": (INFO_FILE, setting("config", "x"), "'config' is 'x'"),
    "info config unknown": (INFO_FILE, edit(INFO_FILE, lambda d: {**d, "config": {}}), "config"),
    "info parameters 10**30": (INFO_FILE, setting("parameters", 10**30), "raise --max-parameters"),
}


@pytest.mark.parametrize("case", DAMAGED)
def test_a_damaged_file_of_the_folder_is_one_line_naming_it(folder: Path, capsys, case: str):
    name, mutate, message = DAMAGED[case]
    mutate(folder)
    line = refused_line(folder, capsys)
    assert str(folder / name) in line and message in line, line


# ---------------------------------------------------------------- links and special files, refused
def link_to(target: str):
    "A mutation: the file becomes a symbolic link to `target`."
    return lambda path: (path.unlink(), path.symlink_to(target))


def subwords(folder: Path) -> None:
    "The folder's settings say a subword model is there (as a subword run's export does)."
    edit(INFO_FILE, lambda d: {**d, "tokenizer": "subwords"})(folder)


def zero_subwords(path: Path) -> None:
    "subwords.model, in a folder that says it has one, a link to /dev/zero (the probe's 7 GB)."
    subwords(path.parent)
    path.symlink_to("/dev/zero")


SPECIAL = {  # id: (file, what it becomes, what the error says)
    "subwords.model to /dev/zero": ("subwords.model", zero_subwords, "is a link"),
    "model.bin a link to a copy": (MODEL, lambda p: link_to(str(p) + ".real")(p), "is a link"),
    "model.bin a hard link": (MODEL, lambda p: os.link(p, p.parent / "copy"), "a hard link"),
    "config.json to /dev/zero": (CONFIG, link_to("/dev/zero"), "is a link"),
    "vocabulary a folder": (VOCAB, lambda p: (p.unlink(), p.mkdir()), "is a folder"),
}


@pytest.mark.parametrize("case", SPECIAL)
def test_no_file_is_read_through_a_link_or_a_special_file(folder: Path, capsys, case: str):
    name, become, message = SPECIAL[case]
    shutil.copy(folder / MODEL, folder / (MODEL + ".real"))
    become(folder / name)
    line = refused_line(folder, capsys)
    assert str(folder / name) in line and message in line, line


@pytest.mark.parametrize("name", ["subwords.model", INFO_FILE])
def test_a_fifo_in_the_folder_is_refused_at_once(folder: Path, name: str):
    subwords(folder)
    (folder / name).unlink(missing_ok=True)
    os.mkfifo(folder / name)  # opened for reading, it waits for a writer: it must not be opened
    done = subprocess.run(
        [sys.executable, "-m", "annotated_transformer.cli", "translate"]
        + ["--checkpoint", str(folder), "Ein Hund ."],
        capture_output=True,
        text=True,
        env=environment(),
        timeout=120,
    )
    line = one_error_line(done.stderr, "translate")
    assert done.returncode == 1 and f"{folder / name} is a FIFO" in line, done.stderr


# ----------------------------------------------------------------------------- the limits on size
def test_max_parameters_refuses_a_bigger_exported_folder(exported: Path, capsys) -> None:
    with pytest.raises(ValueError, match="over the 1,000 allowed") as error:
        load_translator(exported, max_parameters=1000)
    assert str(exported / INFO_FILE) in str(error.value)
    line = refused_line(exported, capsys, "--max-parameters", "1000")
    assert "parameters" in line and "--max-parameters" in line, line
    assert load_translator(exported, max_parameters=10**6).parameters < 10**6


# ------------------------------------------------------------------------------ what export writes
@pytest.mark.parametrize("token", [7, "\ud800", None], ids=["an int", "a lone surrogate", "None"])
def test_export_refuses_a_vocabulary_it_could_not_write_before_writing(tmp_path: Path, token):
    ckpt = tiny_run_checkpoint([*WORDS, token])
    with pytest.raises(ValueError, match="vocabulary has token 11") as error:
        export_model(ckpt, tmp_path / "model")
    assert len(str(error.value).splitlines()) == 1 and str(tmp_path / "model") in str(error.value)
    assert list(tmp_path.iterdir()) == []  # nothing written, no debris


def test_the_folder_lists_the_files_export_wrote(exported: Path) -> None:
    listed = json.loads((exported / INFO_FILE).read_text())["files"]
    assert sorted(listed) == sorted(p.name for p in exported.iterdir())


def test_overwrite_keeps_a_file_export_did_not_write_and_names_it(
    exported: Path, folder: Path, capsys
) -> None:
    (folder / "notes.txt").write_text("mine")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    checkpoint = exported.parent / "last.pt"
    argv = ["export", "--checkpoint", str(checkpoint), "--out", str(folder), "--overwrite"]
    assert main(argv) == 2
    line = one_error_line(capsys.readouterr().err, "export")
    assert "notes.txt" in line and "files export did not write" in line, line
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    (folder / "notes.txt").unlink()
    assert main([*argv, "--quantization", "int8"]) == 0  # export's files alone: replaced
    assert json.loads((folder / INFO_FILE).read_text())["quantization"] == "int8"


def test_overwrite_replaces_an_older_export_without_a_list(exported: Path, folder: Path) -> None:
    edit(INFO_FILE, lambda d: {k: v for k, v in d.items() if k != "files"})(folder)
    checkpoint = exported.parent / "last.pt"
    argv = ["export", "--checkpoint", str(checkpoint), "--out", str(folder), "--overwrite"]
    assert main(argv) == 0
    assert "files" in json.loads((folder / INFO_FILE).read_text())
