"""Your own parallel text through the console command: subwords, one shared vocabulary, the checkpoint alone.

1. The round trip: train one epoch of the tiny model on made-up text in two made-up languages, then
   `evaluate --src --ref --output` and `translate` from a copy of the checkpoint in another folder,
   with no data folder anywhere.
2. Bad input is refused before training, in one line naming the file or flag: files of different
   lengths, non-UTF-8 bytes, a vocabulary the data cannot support, flags that do not go together.
3. A checkpoint whose subword model is missing or altered, and a resume on other data or another
   vocabulary, are refused with what to do.
4. Any two languages of a Multi30k-style folder (`--src-lang`, `--tgt-lang`); spaCy's word-level
   tokenizers only where spaCy knows the language.
"""

from __future__ import annotations

import gzip
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from annotated_transformer.checkpoint import load_checkpoint, model_from_checkpoint, save_checkpoint
from annotated_transformer.cli import main

TINY = ["--model", "tiny", "--max-tokens", "400", "--warmup", "20", "--epochs", "1", "--quiet"]
SYLLABLES = ["ka", "lo", "mi", "zu", "ré", "tan", "vø", "shi", "por", "el"]


def made_up_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    "Sentences of a made-up language and their translations into another: each word has its own translation, in reverse order."
    rng = random.Random(seed)
    words = sorted({"".join(rng.sample(SYLLABLES, 2)) for _ in range(60)})
    other = {
        w: w[::-1].upper()[:3] + "ß" + w[:1] for w in words
    }  # a second spelling system, with a non-ASCII letter
    pairs = []
    for _ in range(n):
        sentence = rng.sample(words, rng.randint(3, 7))
        pairs.append(
            (" ".join(sentence) + ".", " ".join(other[w] for w in reversed(sentence)) + " !")
        )
    return pairs


def write_lines(path: Path, lines: list[str], gzipped: bool = False) -> Path:
    data = "".join(line + "\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if gzipped else data)
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    "Training files (plain, with three empty lines), validation files (gzipped) and test files (one empty source line)."
    folder = tmp_path_factory.mktemp("corpus")
    pairs = made_up_pairs(330)
    train, valid, test = pairs[:300], pairs[300:320], pairs[320:]
    src = [s for s, _ in train]
    tgt = [t for _, t in train]
    src[5], tgt[9], src[20], tgt[20] = "", "", "", "  "  # three pairs with an empty side
    test_src = [s for s, _ in test]
    test_src[3] = ""
    return {
        "train_src": write_lines(folder / "train.xa", src),
        "train_tgt": write_lines(folder / "train.xb", tgt),
        "valid_src": write_lines(folder / "valid.xa.gz", [s for s, _ in valid], gzipped=True),
        "valid_tgt": write_lines(folder / "valid.xb.gz", [t for _, t in valid], gzipped=True),
        "test_src": write_lines(folder / "test.xa", test_src),
        "test_ref": write_lines(folder / "test.xb", [t for _, t in test]),
    }


def file_args(corpus: dict[str, Path]) -> list[str]:
    return [
        arg
        for name in ("train_src", "train_tgt", "valid_src", "valid_tgt")
        for arg in ("--" + name.replace("_", "-"), str(corpus[name]))
    ]


@pytest.fixture(scope="module")
def run(corpus: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    "The run folder of one epoch on the made-up corpus, subwords of 400."
    out = tmp_path_factory.mktemp("runs") / "mine"
    assert main(["train", "--out", str(out), *file_args(corpus), "--vocab-size", "400", *TINY]) == 0
    return out


def one_error(err: str, command: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"annotated-transformer {command}: error: "), err
    return lines[0]


# =========================================================================== 1. the round trip
def test_a_run_on_your_own_files_is_subwords_with_one_tied_vocabulary(run: Path, capsys) -> None:
    ckpt = load_checkpoint(run / "last.pt")
    assert ckpt["config"]["vocab_size"] == 400 and ckpt["config"]["model"]["share_embeddings"]
    assert ckpt["src_vocab"] == ckpt["tgt_vocab"] and len(ckpt["src_vocab"]["itos"]) == 400
    assert ckpt["tokenizer"]["type"] == "sentencepiece" and "tokenizer" in load_checkpoint(
        run / "epoch1.pt"
    )
    model, _, _ = model_from_checkpoint(ckpt)
    assert (
        model.src_embed[0].lut.weight
        is model.tgt_embed[0].lut.weight
        is model.generator.proj.weight
    )
    assert set(ckpt["data"]) == {"train", "val"} and ckpt["data"]["train"]["files"][0].endswith(
        "train.xa"
    )


def test_empty_training_lines_are_skipped_as_pairs_and_counted(
    corpus: dict[str, Path], tmp_path: Path, capsys
) -> None:
    assert (
        main(
            [
                "train",
                "--out",
                str(tmp_path / "run"),
                *file_args(corpus),
                "--vocab-size",
                "400",
                *TINY,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert (
        f"train: skipped 3 pairs with an empty line on one side or both ({corpus['train_src']}, {corpus['train_tgt']})"
        in out
    )
    assert "297 training pairs" in out


def test_evaluate_and_translate_from_the_checkpoint_alone_in_another_folder(
    run: Path, corpus: dict[str, Path], tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(run / "last.pt", elsewhere / "model.pt")
    for name in ("test_src", "test_ref"):
        shutil.copy(corpus[name], elsewhere / corpus[name].name)
    env = {k: v for k, v in os.environ.items() if k != "MULTI30K_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "empty-cache")  # no downloaded data either
    command = [sys.executable, "-m", "annotated_transformer.cli"]
    done = subprocess.run(
        [
            *command,
            "evaluate",
            "--checkpoint",
            "model.pt",
            "--src",
            "test.xa",
            "--ref",
            "test.xb",
            "--output",
            "test.out",
            "--quiet",
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout.startswith("test.xa (10 sentences, greedy): sacreBLEU ")
        and "tokenized" not in done.stdout
    )
    written = (elsewhere / "test.out").read_text(encoding="utf-8").split("\n")
    assert (
        len(written) == 11 and written[3] == "" and written[-1] == ""
    )  # ten lines, the empty source's empty
    lines = (elsewhere / "test.xa").read_text().splitlines()
    done = subprocess.run(
        [*command, "translate", "--checkpoint", "model.pt"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        input="\n".join(lines[:5]) + "\n",
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:5] == written[:5]  # the same translations, the empty line kept
    again = subprocess.run(
        [
            *command,
            "evaluate",
            "--checkpoint",
            "model.pt",
            "--src",
            "test.xa",
            "--ref",
            "test.xb",
            "--output",
            "test.out",
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 2 and "--output test.out exists" in one_error(
        again.stderr, "evaluate"
    )


# =========================================================================== 2. bad input, before training
def test_files_of_different_lengths_are_refused_naming_both(
    corpus: dict[str, Path], tmp_path: Path, capsys
) -> None:
    short = write_lines(tmp_path / "short.xb", ["ABCß !"] * 7)
    args = file_args(corpus)
    args[args.index("--train-tgt") + 1] = str(short)
    assert main(["train", "--out", str(tmp_path / "run"), *args, *TINY]) == 1
    line = one_error(capsys.readouterr().err, "train")
    assert f"{corpus['train_src']} has 300 lines but {short} has 7" in line
    assert not list((tmp_path / "run").glob("*.pt"))


def test_non_utf8_is_refused_naming_file_and_line(
    corpus: dict[str, Path], tmp_path: Path, capsys
) -> None:
    bad = tmp_path / "latin1.xa"
    bad.write_bytes(corpus["valid_src"].read_bytes())
    lines = gzip.decompress(bad.read_bytes()).split(b"\n")
    lines[4] = "Käse".encode("latin-1")
    bad.write_bytes(b"\n".join(lines))
    args = file_args(corpus)
    args[args.index("--valid-src") + 1] = str(bad)
    assert main(["train", "--out", str(tmp_path / "run"), *args, *TINY]) == 1
    assert f"{bad}:5: invalid UTF-8" in one_error(capsys.readouterr().err, "train")


def test_a_vocabulary_the_data_cannot_support_is_refused(
    corpus: dict[str, Path], tmp_path: Path, capsys
) -> None:
    assert (
        main(
            [
                "train",
                "--out",
                str(tmp_path / "run"),
                *file_args(corpus),
                "--vocab-size",
                "50000",
                *TINY,
            ]
        )
        == 1
    )
    line = one_error(capsys.readouterr().err, "train")
    assert "vocab_size=50000" in line or "vocabulary size 50000" in line, line
    assert not list((tmp_path / "run").glob("*.pt"))


@pytest.mark.parametrize(
    "drop, extra, message",
    [
        ("--valid-tgt", [], "--valid-tgt missing"),
        (
            None,
            ["--data-dir", "somewhere"],
            "--data-dir, --src-lang and --tgt-lang choose Multi30k's files",
        ),
        (
            None,
            ["--src-lang", "fr"],
            "--data-dir, --src-lang and --tgt-lang choose Multi30k's files",
        ),
    ],
)
def test_flags_that_do_not_go_together_are_usage_errors(
    drop: str | None,
    extra: list[str],
    message: str,
    corpus: dict[str, Path],
    tmp_path: Path,
    capsys,
) -> None:
    args = file_args(corpus)
    if drop:
        del args[args.index(drop) : args.index(drop) + 2]
    assert main(["train", "--out", str(tmp_path / "run"), *args, *extra, *TINY]) == 2
    assert message in one_error(capsys.readouterr().err, "train")
    assert not (tmp_path / "run").exists()


def test_evaluate_flags_are_checked_before_the_checkpoint_loads(
    corpus: dict[str, Path], tmp_path: Path, capsys
) -> None:
    missing = str(tmp_path / "missing.pt")
    assert main(["evaluate", "--checkpoint", missing, "--src", str(corpus["test_src"])]) == 2
    assert "--src and --ref go together" in one_error(capsys.readouterr().err, "evaluate")
    assert (
        main(
            [
                "evaluate",
                "--checkpoint",
                missing,
                "--src",
                str(corpus["test_src"]),
                "--ref",
                str(tmp_path / "nope"),
            ]
        )
        == 2
    )
    assert f"--ref {tmp_path / 'nope'}: no such file" in one_error(
        capsys.readouterr().err, "evaluate"
    )
    assert (
        main(
            [
                "evaluate",
                "--checkpoint",
                missing,
                "--src",
                str(corpus["test_src"]),
                "--ref",
                str(corpus["test_ref"]),
                "--split",
                "val",
            ]
        )
        == 2
    )
    assert "--split chooses a Multi30k split" in one_error(capsys.readouterr().err, "evaluate")


def test_evaluate_refuses_references_of_another_length(
    run: Path, corpus: dict[str, Path], tmp_path: Path, capsys
) -> None:
    refs = write_lines(tmp_path / "refs", ["ABCß !"] * 4)
    assert (
        main(
            [
                "evaluate",
                "--checkpoint",
                str(run / "last.pt"),
                "--src",
                str(corpus["test_src"]),
                "--ref",
                str(refs),
            ]
        )
        == 1
    )
    assert f"{corpus['test_src']} has 10 lines but {refs} has 4" in one_error(
        capsys.readouterr().err, "evaluate"
    )


# =========================================================================== 3. the subword model in the checkpoint; resumes
def test_a_checkpoint_without_or_with_an_altered_subword_model_is_refused(
    run: Path, tmp_path: Path, capsys
) -> None:
    ckpt = load_checkpoint(run / "last.pt")
    without = tmp_path / "without.pt"
    save_checkpoint(
        without, **{k: v for k, v in ckpt.items() if k not in ("tokenizer", "format", "version")}
    )
    assert main(["translate", "--checkpoint", str(without), "kamilo zuré."]) == 1
    assert "was trained with subwords but holds no subword model" in one_error(
        capsys.readouterr().err, "translate"
    )
    altered = tmp_path / "altered.pt"
    model_bytes = bytearray(ckpt["tokenizer"]["model"])
    model_bytes[-1] ^= 1
    tokenizer = {**ckpt["tokenizer"], "model": bytes(model_bytes)}
    save_checkpoint(
        altered,
        **{
            **{k: v for k, v in ckpt.items() if k not in ("format", "version")},
            "tokenizer": tokenizer,
        },
    )
    assert main(["translate", "--checkpoint", str(altered), "kamilo zuré."]) == 1
    line = one_error(capsys.readouterr().err, "translate")
    assert str(altered) in line and "SHA-256" in line


def test_a_resume_on_other_data_or_another_vocabulary_is_refused(
    run: Path, corpus: dict[str, Path], tmp_path: Path, capsys
) -> None:
    out = tmp_path / "run"
    shutil.copytree(run, out)
    other = write_lines(
        tmp_path / "other.xb", [t.lower() for t in corpus["train_tgt"].read_text().split("\n")[:-1]]
    )
    args = file_args(corpus)
    args[args.index("--train-tgt") + 1] = str(other)
    resume = ["train", "--out", str(out), "--resume", "--epochs", "2", "--quiet"]
    assert main([*resume, *args]) == 1
    line = one_error(capsys.readouterr().err, "train")
    assert "--resume with other data than" in line and str(other) in line
    assert main([*resume, *file_args(corpus), "--vocab-size", "500"]) == 1
    assert "vocab_size=500 (the run has 400)" in one_error(capsys.readouterr().err, "train")
    assert load_checkpoint(out / "last.pt")["epoch"] == 1  # nothing trained


# =========================================================================== 4. any two languages of a Multi30k-style folder
def test_any_two_languages_of_a_multi30k_folder(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "multi30k"
    folder.mkdir()
    pairs = made_up_pairs(240, seed=1)
    for split, stem, rows in (
        ("train", "train", pairs[:200]),
        ("val", "val", pairs[200:220]),
        ("test2016", "test_2016_flickr", pairs[220:]),
    ):
        write_lines(folder / f"{stem}.xa.gz", [s for s, _ in rows], gzipped=True)
        write_lines(folder / f"{stem}.xb.gz", [t for _, t in rows], gzipped=True)
    langs = ["--data-dir", str(folder), "--src-lang", "xa", "--tgt-lang", "xb"]
    assert (
        main(["train", "--out", str(tmp_path / "words"), *langs, *TINY]) == 1
    )  # words need spaCy's tokenizer for the language
    assert (
        "spaCy has no tokenizer for one of the languages ['xa', 'xb']: use subwords"
        in one_error(capsys.readouterr().err, "train")
    )
    assert (
        main(["train", "--out", str(tmp_path / "subwords"), *langs, "--vocab-size", "350", *TINY])
        == 0
    )
    capsys.readouterr()
    ckpt = load_checkpoint(tmp_path / "subwords" / "last.pt")
    assert (ckpt["config"]["src_lang"], ckpt["config"]["tgt_lang"], ckpt["data"]) == (
        "xa",
        "xb",
        {"multi30k": ["xa", "xb"]},
    )
    assert (
        main(
            [
                "evaluate",
                "--checkpoint",
                str(tmp_path / "subwords" / "last.pt"),
                "--data-dir",
                str(folder),
                "--quiet",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.startswith("test2016 (20 sentences, greedy): sacreBLEU ")
    assert (
        main(
            [
                "train",
                "--out",
                str(tmp_path / "missing"),
                "--data-dir",
                str(folder),
                "--src-lang",
                "xc",
                "--vocab-size",
                "350",
                *TINY,
            ]
        )
        == 1
    )
    assert "the folder's languages: xa, xb" in one_error(capsys.readouterr().err, "train")
