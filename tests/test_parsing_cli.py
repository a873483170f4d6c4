"""`annotated-transformer parse` end to end: a tiny run trained on a made-up treebank (wsj_0001 to
wsj_0003 for training, wsj_0160 for validation, wsj_0180 for test) through the console command.

1. parse prints a tree a line for each sentence, given as arguments or on standard input (blank
   for blank), over exactly the sentence's words; --pretty draws them; the Search flags apply.
2. What it refuses, in one line: a checkpoint not trained on the treebank, --buffer-size 0, no
   --checkpoint.
3. In Python: Parser gives the trees the command prints; score_parses of the gold trees against
   themselves is 100.
4. Resuming the run on other treebank files is refused.
"""

from __future__ import annotations

import dataclasses
import io
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from clitools import (
    TINY_RUN,
    cli,
    copy_run,
    environment,
    one_line_failure,
    refused,
    refused_while_parsing,
)
from nltk import Tree
from synthetic import write_treebank

from annotated_transformer.cli import main
from annotated_transformer.parsing import PARSING, Parser
from annotated_transformer.trees import (
    Delinearized,
    Treebank,
    delinearize,
    evalb,
    linearize,
    score_parses,
    show_tree,
)

SENTENCES = ["the cat saw a dog .", "a man chased the bird near the mat", "dog"]


@pytest.fixture(scope="module")
def treebank(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_treebank(tmp_path_factory.mktemp("treebank") / "tb")


def train_argv(out: Path, data: Path, epochs: int = 2, *flags: str) -> list[str]:
    "The argv of a tiny `train` into `out` on the treebank in `data`."
    corpus = ["--corpus", "treebank", "--data-dir", str(data)]
    return ["train", *corpus, "--out", str(out), *TINY_RUN, "--epochs", str(epochs), *flags]


@pytest.fixture(scope="module")
def run(treebank: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    "Two epochs of the tiny size on the made-up treebank, through the console command."
    out = tmp_path_factory.mktemp("runs") / "parser"
    assert main(train_argv(out, treebank)) == 0
    return out


def parse(run: Path, *args: str, capsys: pytest.CaptureFixture) -> list[str]:
    "The lines parse prints for `args`, nothing on standard error."
    assert main(["parse", "--checkpoint", str(run / "last.pt"), *args]) == 0
    out, err = capsys.readouterr()
    assert err == "", err
    return out.splitlines()


def leaves(line: str) -> list[str]:
    return Tree.fromstring(line).leaves()


# ------------------------------------------------------------------------------------ parse
def test_the_run_trained_on_the_treebanks_pairs(run, treebank):
    from annotated_transformer.checkpoint import load_checkpoint

    ckpt = load_checkpoint(run / "last.pt")
    assert ckpt.config.corpus == "treebank" and len(ckpt.history) == 2
    assert ckpt.data == {**Treebank(treebank).origin(), "folder": str(treebank.resolve())}


def test_parse_prints_a_tree_over_each_sentence_given_as_arguments(run, capsys):
    lines = parse(run, *SENTENCES, capsys=capsys)
    assert len(lines) == len(SENTENCES)
    for line, sentence in zip(lines, SENTENCES):
        assert leaves(line) == sentence.split(), line
        assert line == show_tree(Tree.fromstring(line))  # one line, as show_tree writes it


def test_parse_reads_standard_input_a_line_out_for_a_line_in(run, capsys, monkeypatch):
    text = f"{SENTENCES[0]}\n\n   \n{SENTENCES[1]}\n{SENTENCES[2]}\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    lines = parse(run, "--buffer-size", "2", capsys=capsys)
    assert len(lines) == 5 and lines[1] == lines[2] == ""
    assert [leaves(lines[i]) for i in (0, 3, 4)] == [s.split() for s in SENTENCES]
    # the same trees as for the sentences given as arguments
    assert [lines[i] for i in (0, 3, 4)] == parse(run, *SENTENCES, capsys=capsys)


def test_parse_in_a_pipeline_of_its_own(run):
    done = cli("parse", "--checkpoint", str(run / "last.pt"), stdin=f"{SENTENCES[0]}\n\nman\n")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and lines[1] == ""
    assert leaves(lines[0]) == SENTENCES[0].split() and leaves(lines[2]) == ["man"]


def test_parse_pretty_draws_each_tree(run, capsys):
    flat = parse(run, SENTENCES[0], capsys=capsys)
    drawn = parse(run, "--pretty", SENTENCES[0], capsys=capsys)
    assert len(drawn) > 3
    assert all(word in "\n".join(drawn) for word in SENTENCES[0].split())
    assert Tree.fromstring(flat[0]).label() in "\n".join(drawn)


def test_parse_takes_the_search_flags(run, capsys):
    greedy = parse(run, "--beam", "1", *SENTENCES, capsys=capsys)
    assert [leaves(line) for line in greedy] == [s.split() for s in SENTENCES]
    parser = Parser.from_checkpoint(run / "last.pt")
    search = dataclasses.replace(PARSING, beam_size=1)
    assert greedy == [show_tree(p.tree) for p in parser.parse(SENTENCES, search)]


def test_parse_refuses_a_checkpoint_not_trained_on_the_treebank(tiny_checkpoint, capsys):
    line = refused(["parse", "--checkpoint", str(tiny_checkpoint), "a cat"], 2, capsys)
    assert line.startswith(f"annotated-transformer parse: error: --checkpoint {tiny_checkpoint}")
    assert "trained on multi30k, not on the treebank" in line


def test_parse_refuses_a_folder_as_its_checkpoint(tiny_checkpoint, capsys):
    folder = tiny_checkpoint.parent
    line = refused(["parse", "--checkpoint", str(folder), "a cat"], 1, capsys)
    assert line.endswith(f"--checkpoint {folder} is a folder, not a checkpoint file"), line


def test_parse_refuses_a_buffer_of_no_lines(run, capsys):
    argv = ["parse", "--checkpoint", str(run / "last.pt"), "--buffer-size", "0"]
    line = refused(argv, 2, capsys)
    assert line.endswith("error: --buffer-size must be at least 1, got 0")


def test_parse_needs_a_checkpoint(capsys):
    line = refused_while_parsing(["parse", "a cat"], capsys)
    assert "--checkpoint" in line and "required" in line


# ------------------------------------------------------------------------------------ Python
def test_the_parser_gives_the_trees_the_command_prints(run, capsys):
    printed = parse(run, *SENTENCES, capsys=capsys)
    parses = Parser.from_checkpoint(run / "last.pt").parse([*SENTENCES, "  "])
    assert parses[-1] is None
    assert [show_tree(p.tree) for p in parses[:-1]] == printed
    assert all(isinstance(p.well_formed, bool) for p in parses[:-1])


def test_the_gold_trees_score_100_against_themselves(treebank):
    golds = Treebank(treebank).trees("test")
    assert len(golds) == 8
    parses = [delinearize(linearize(g), g.leaves()) for g in golds]  # every tag XX
    scores = score_parses(golds, parses)
    # exact below: 100 * n / n from whole counts
    assert scores.scores.all.f1 == 100.0 and scores.scores.all.sentences == 8  # exact
    assert scores.well_formed == 100.0 and scores.to_dict()["short"]["f1"] == 100.0  # exact
    assert scores.one_slot_per_word == 100.0  # exact
    # and one bracket less is not 100
    first = golds[0].copy(deep=True)
    first[1] = Tree("X", list(first[1]))
    worse = score_parses(golds, [Delinearized(first, True, len(first.leaves())), *parses[1:]])
    assert worse.scores.all.f1 < 100.0 and worse.scores.all.matched == scores.scores.all.gold - 1


def test_the_models_parses_of_the_test_trees_are_scored(run, treebank):
    golds = Treebank(treebank).trees("test")
    search = dataclasses.replace(PARSING, beam_size=2)
    parses = Parser.from_checkpoint(run / "last.pt").parse(
        [" ".join(g.leaves()) for g in golds], search
    )
    scores = score_parses(golds, parses)
    assert scores.scores.all.sentences == 8 and 0 <= scores.scores.all.f1 <= 100
    assert scores.scores.all.gold == evalb(golds, golds).all.gold
    assert scores.well_formed == 100 * sum(p.well_formed for p in parses) / 8  # exact: the same


# ------------------------------------------------------------------------ only trees
def test_the_trained_parser_writes_only_trees_by_default(run, treebank, capsys):
    "PARSING's strategy writes trees: every output, greedy and beam, needs no repair."
    golds = [*Treebank(treebank).trees("test"), *Treebank(treebank).trees("train")]
    given = [" ".join(g.leaves()) for g in golds]
    parser = Parser.from_checkpoint(run / "last.pt")
    for search in (
        dataclasses.replace(PARSING, beam_size=4),
        dataclasses.replace(PARSING, beam_size=1),
    ):
        for found, gold in zip(parser.parse(given, search), golds):
            assert found.well_formed and found.slots == len(gold.leaves()), show_tree(found.tree)
            assert found.tree.leaves() == gold.leaves()
    printed = parse(run, "--beam", "4", *given[:3], capsys=capsys)
    beam4 = dataclasses.replace(PARSING, beam_size=4)
    assert printed == [show_tree(p.tree) for p in parser.parse(given[:3], beam4)]


def test_the_unconstrained_search_stays_available(run, capsys):
    "--strategy beam (or greedy): the search as it was, its outputs repaired into trees."
    lines = parse(run, "--strategy", "beam", *SENTENCES, capsys=capsys)
    free = dataclasses.replace(PARSING, strategy="beam")
    parses = Parser.from_checkpoint(run / "last.pt").parse(SENTENCES, free)
    assert lines == [show_tree(p.tree) for p in parses]
    assert [leaves(line) for line in lines] == [s.split() for s in SENTENCES]


# ------------------------------------------------------------------------------------ resume
def test_resuming_on_other_treebank_files_is_refused(run, treebank, tmp_path, capsys):
    other = Path(shutil.copytree(treebank, tmp_path / "other"))
    train_file = other / "wsj_0002.mrg"
    train_file.write_text(train_file.read_text().replace("(NN cat)", "(NN dog)", 1))
    copy = copy_run(run, tmp_path / "run")
    line = one_line_failure(train_argv(copy, other, 3, "--resume"), capsys)
    assert line.startswith("annotated-transformer train: error: --resume with other data than")
    # the same files: it resumes
    same = copy_run(run, tmp_path / "same")
    assert main(train_argv(same, treebank, 3, "--resume")) == 0
    capsys.readouterr()


def test_parse_stops_quietly_when_its_reader_does(run):
    parse = f"{sys.executable} -m annotated_transformer.cli parse --checkpoint {run / 'last.pt'}"
    pipeline = f"yes '{SENTENCES[0]}' | head -50 | {parse} --beam 1 --buffer-size 1 | head -1"
    done = subprocess.run(
        ["bash", "-c", pipeline + '; echo "parse: ${PIPESTATUS[2]}" >&2'],
        capture_output=True,
        text=True,
        env=environment(),
        timeout=300,
    )
    assert leaves(done.stdout.strip()) == SENTENCES[0].split()
    assert done.stderr.strip() == "parse: 0", done.stderr  # no traceback, no error line


def test_a_refused_line_stops_parse_after_the_lines_before_it(run, capsys, monkeypatch):
    "Round four: a 10,000-word line 150 was called 'sentence 49' and 49 good lines were lost."
    lines = ["The cat sat ."] * 149 + ["cat " * 10_000] + ["The dog ran ."] * 3
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(line + "\n" for line in lines)))
    assert main(["parse", "--checkpoint", str(run / "last.pt"), "--buffer-size", "100"]) == 1
    out, err = capsys.readouterr()
    assert out.count("\n") == 149
    assert "stopped at input line 150: line 150 has 10000 tokens" in err


def test_parse_writes_its_trees_to_a_new_output_file(run, tmp_path, capsys):
    "--output (round four): the trees that it prints, into a new file; never over one."
    out = tmp_path / "trees.txt"
    assert (
        main(["parse", "--checkpoint", str(run / "last.pt"), "--output", str(out), *SENTENCES]) == 0
    )
    assert capsys.readouterr().out == ""
    assert out.read_text().splitlines() == parse(run, *SENTENCES, capsys=capsys)
    line = refused(
        ["parse", "--checkpoint", str(run / "last.pt"), "--output", str(out), "man"], 2, capsys
    )
    assert line.endswith(f"--output {out} exists: it is never overwritten"), line
