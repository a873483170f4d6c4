"""The treebank a user names (`--corpus treebank --data-dir D`, $TREEBANK_DIR), damaged or hostile
(round four): every file is opened as a regular file (a FIFO, device or link named like a `.mrg`
file is refused, never read), each member of a zip is bounded before it is inflated (a zip bomb
stops at the limit), a damaged archive (a bad CRC, an unknown compression, a broken deflate stream)
and a malformed tree (a word outside a labelled bracket, brackets nested beyond any sentence's) are
refused in one line naming the file; `parse` writes bracket words as the treebank does, and what
it writes reads back as trees with the project's own reader."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest
from synthetic import write_treebank

from annotated_transformer import trees
from annotated_transformer.trees import read_trees, show_tree, treebank_texts, treebank_words

pytest.importorskip("nltk")


def zipped(path: Path, files: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> Path:
    "A zip at `path` holding `files`."
    with zipfile.ZipFile(path, "w", compression=method) as package:
        for name, data in files.items():
            package.writestr(name, data)
    return path


def damaged(path: Path, at: int, value: bytes) -> Path:
    "The file at `path` with `value` written over it at byte `at` (negative: from the end)."
    data = bytearray(path.read_bytes())
    at = at % len(data)
    data[at : at + len(value)] = value
    path.write_bytes(bytes(data))
    return path


TREE = b"( (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)) )\n"


def local_header_end(path: Path) -> int:
    "Where the first member's data starts in a zip of one member."
    with zipfile.ZipFile(path) as package:
        info = package.infolist()[0]
    data = path.read_bytes()
    name_length = int.from_bytes(data[26:28], "little")
    extra_length = int.from_bytes(data[28:30], "little")
    assert info.header_offset == 0
    return 30 + name_length + extra_length


def bad_crc(folder: Path) -> Path:
    path = zipped(folder / "treebank.zip", {"wsj_0001.mrg": TREE}, zipfile.ZIP_STORED)
    return damaged(path, local_header_end(path) + 5, b"X")  # the data changed, its CRC not


def unknown_method(folder: Path) -> Path:
    path = zipped(folder / "treebank.zip", {"wsj_0001.mrg": TREE}, zipfile.ZIP_STORED)
    data = bytearray(path.read_bytes())
    for at in (8, data.rfind(b"PK\x01\x02") + 10):  # the method, in both headers: 99, unknown
        data[at : at + 2] = (99).to_bytes(2, "little")
    path.write_bytes(bytes(data))
    return path


def broken_deflate(folder: Path) -> Path:
    path = zipped(folder / "treebank.zip", {"wsj_0001.mrg": TREE * 50})
    return damaged(path, local_header_end(path), b"\xff\xff\xff\xff")


def zip_bomb(folder: Path) -> Path:
    return zipped(folder / "treebank.zip", {"wsj_0001.mrg": b" " * (trees.MRG_BYTES + 1)})


def fifo(folder: Path) -> Path:
    os.mkfifo(folder / "wsj_0001.mrg")
    return folder


def device(folder: Path) -> Path:
    (folder / "wsj_0001.mrg").symlink_to("/dev/zero")
    return folder


CASES = [  # (name, make(folder) -> what to read, what the one line says)
    ("bad CRC", bad_crc, "a damaged zip archive (Bad CRC-32"),
    (
        "unknown compression",
        unknown_method,
        "a damaged zip archive (That compression method is not",
    ),
    ("broken deflate stream", broken_deflate, "a damaged zip archive"),
    ("zip bomb", zip_bomb, f"over {trees.MRG_BYTES:,} bytes, not a treebank file"),
    ("a FIFO as .mrg", fifo, "not a plain file (a link, FIFO or device)"),
    ("/dev/zero as .mrg", device, "not a plain file (a link, FIFO or device)"),
]


@pytest.mark.parametrize("name, make, says", CASES, ids=[c[0] for c in CASES])
def test_a_damaged_or_hostile_treebank_is_one_line(name, make, says, tmp_path: Path) -> None:
    with pytest.raises(ValueError) as refused:
        treebank_texts(make(tmp_path))
    line = str(refused.value)
    assert says in line and "\n" not in line, line


@pytest.mark.parametrize(
    "text, says",
    [
        ("( (S (NP (DT The) (NN cat)) sat) )", "the word 'sat' stands outside a labelled bracket"),
        ("(S " * 300 + ")" * 300, f"brackets nested over {trees.MAX_DEPTH} deep"),
        ("( (S (NP (DT The) (NN cat) )", "bracket(s) left open at the end"),
    ],
    ids=["a word outside a bracket", "300 deep", "left open"],
)
def test_a_malformed_tree_is_one_line_naming_its_file(text: str, says: str) -> None:
    with pytest.raises(ValueError) as refused:
        read_trees(text, "wsj_0001.mrg")
    assert str(refused.value).startswith("wsj_0001.mrg: ") and says in str(refused.value)


def test_the_sample_still_reads(tmp_path: Path) -> None:
    texts = treebank_texts(write_treebank(tmp_path / "tb"))
    assert texts and all(read_trees(text) for text in texts.values())


def test_bracket_words_are_written_as_the_treebank_does_and_read_back() -> None:
    "Round four: a sentence whose words are brackets gave a tree no reader could read back."
    words = treebank_words("( a ) f(x) ((")
    assert words == ["-LRB-", "a", "-RRB-", "f-LRB-x-RRB-", "-LRB--LRB-"]
    Tree = trees.nltk_tree()
    tree = Tree("S", [Tree("XX", [w]) for w in words])
    assert read_trees(show_tree(tree))[0].leaves() == words


# ---------------------------------------------------------------- round four, item 6: the probes
def test_a_zip_holding_one_file_twice_is_refused_naming_both(tmp_path: Path) -> None:
    "Round four: a second wsj_0001.mrg in another folder of the zip silently replaced the first."
    path = zipped(
        tmp_path / "treebank.zip",
        {"treebank/combined/wsj_0001.mrg": TREE, "../../elsewhere/wsj_0001.mrg": TREE},
    )
    with pytest.raises(ValueError) as refused:
        treebank_texts(path)
    assert str(refused.value) == (
        f"{path}: holds wsj_0001.mrg twice, treebank/combined/wsj_0001.mrg and "
        "../../elsewhere/wsj_0001.mrg"
    )


def test_dot_dot_and_absolute_names_in_a_zip_are_read_never_extracted(tmp_path: Path) -> None:
    "Members named ../ or / are read from the archive: nothing is written anywhere."
    folder = tmp_path / "a" / "b"
    folder.mkdir(parents=True)
    path = zipped(folder / "treebank.zip", {"../../wsj_0001.mrg": TREE, "/abs/wsj_0002.mrg": TREE})
    before = sorted(tmp_path.rglob("*"))
    assert treebank_texts(path) == {1: TREE.decode(), 2: TREE.decode()}
    assert sorted(tmp_path.rglob("*")) == before


def test_a_nul_byte_in_a_word_is_part_of_the_word() -> None:
    [tree] = read_trees("( (S (NN a\0b) (. .)) )", "wsj_0001.mrg")
    assert tree.leaves() == ["a\0b", "."]
