"""`annotated-transformer translate` and `evaluate`, through the real command in a process of its
own.

1. translate in a shell pipeline: it streams standard input, every --buffer-size lines translated
   and printed (flushed) as they arrive, a line out for a line in, blank for blank; a reader that
   stops early stops it quietly.
2. --output writes a new file instead, never over one.
3. --nbest K prints beam search's K best of each sentence as `INDEX<TAB>SCORE<TAB>TRANSLATION`.
4. evaluate --json: sacreBLEU's JSON fields and the decoding settings, the same score as the
   `sacrebleu` command gives for the same files.
5. A run on your own files: evaluate and translate from a copy of its checkpoint alone, in another
   folder, with no data anywhere; references of another length, a subword model that is missing
   from the checkpoint or altered, refused.
"""

from __future__ import annotations

import itertools
import json
import os
import selectors
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from clitools import cli, environment, one_error_line, refused
from synthetic import synthetic_pairs, write_lines

from annotated_transformer.checkpoint import load_checkpoint
from annotated_transformer.cli import main
from annotated_transformer.fast_decoding import beam_search
from annotated_transformer.model import count_parameters

SENTENCES = [
    "Ein Mann sieht einen Ball.",
    "Zwei Männer sehen ein Auto im Schnee.",
    "Ein Hund trägt einen Hut.",
]
WAIT = 120  # seconds a line may take to come back: Python, PyTorch and the model load first


def translate(checkpoint: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    "Run translate with `stdin` on its standard input, to the end; its output captured as text."
    return cli("translate", "--checkpoint", str(checkpoint), *args, stdin=stdin)


def read_line(process: subprocess.Popen, seconds: float = WAIT) -> str:
    "The process's next line of output, waited for at most `seconds` (a failure, not a hang)."
    fd, line, deadline = process.stdout.fileno(), b"", time.monotonic() + seconds
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                pytest.fail(f"no line on standard output within {seconds} s (so far {line!r})")
            byte = os.read(fd, 1)  # a byte at a time: nothing past the line is taken from the pipe
            if not byte:
                stderr = process.stderr.read().decode()
                pytest.fail(f"standard output closed before a whole line: {line!r}; {stderr}")
            line += byte
    return line.decode()


@pytest.fixture
def streaming(tiny_checkpoint: Path):
    "A factory of running translate commands, pipes on all three streams; any left running killed."
    started = []

    def start(*args: str) -> subprocess.Popen:
        command = [sys.executable, "-m", "annotated_transformer.cli", "translate"]
        started.append(
            subprocess.Popen(
                [*command, "--checkpoint", str(tiny_checkpoint), *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=environment(),
            )
        )
        return started[-1]

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout, process.stderr):
            if not stream.closed:
                stream.close()


# =========================================================================== 1. streaming
def test_each_line_is_translated_before_standard_input_ends(
    tiny_checkpoint: Path, streaming
) -> None:
    expected = translate(tiny_checkpoint, *SENTENCES[:2]).stdout.splitlines()
    process = streaming("--buffer-size", "1")
    for sentence, translation in zip(SENTENCES[:2], expected):
        process.stdin.write(f"{sentence}\n".encode())
        # and the pipe stays open: the translation must come without the end of the input
        process.stdin.flush()
        assert read_line(process) == translation + "\n"
    process.stdin.close()
    assert process.wait(timeout=WAIT) == 0
    assert process.stdout.read() == b"" and process.stderr.read() == b""


def test_blank_lines_stay_in_place_whatever_the_buffer_size(tiny_checkpoint: Path) -> None:
    text = f"\n{SENTENCES[0]}\n\n  \n{SENTENCES[1]}\r\n{SENTENCES[2]}\n\n"
    one_by_one = translate(tiny_checkpoint, *SENTENCES).stdout.splitlines()
    for size in ("2", "1000"):
        done = translate(tiny_checkpoint, "--buffer-size", size, stdin=text)
        assert done.returncode == 0 and done.stderr == "", (size, done.stderr)
        assert done.stdout.split("\n") == [
            "",
            one_by_one[0],
            "",
            "",
            one_by_one[1],
            one_by_one[2],
            "",
            "",
        ], size


def test_standard_input_without_a_sentence_prints_a_line_for_each_line_read(
    tiny_checkpoint: Path,
) -> None:
    for text, printed in (("", ""), ("\n  \n", "\n\n")):
        done = translate(tiny_checkpoint, stdin=text)
        assert (done.returncode, done.stdout, done.stderr) == (0, printed, "")


def test_a_line_that_is_not_utf8_is_named_by_its_number_in_the_whole_input(
    tiny_checkpoint: Path,
) -> None:
    """Every line before it is printed, its own chunk's too (round four: those were lost); the line
    counts from the start of the input, not its chunk."""
    stdin = f"{SENTENCES[0]}\n\n{SENTENCES[1]}\n".encode() + b"Ein \xff Hund.\n"
    done = cli("translate", "--checkpoint", str(tiny_checkpoint), "--buffer-size", "2", stdin=stdin)
    assert done.returncode == 1
    first = translate(tiny_checkpoint, SENTENCES[0]).stdout.strip()
    third = translate(tiny_checkpoint, SENTENCES[1]).stdout.strip()
    assert done.stdout.decode().split("\n") == [first, "", third, ""]
    assert one_error_line(done.stderr.decode(), "translate").endswith(
        "standard input, line 4: byte 0xff at position 5 is not UTF-8 text"
    )


def test_a_reader_that_stops_early_stops_the_command_quietly(streaming) -> None:
    "Like `translate < big.txt | head -1`: no error message, status 0, once the reader is gone."
    process = streaming("--buffer-size", "1")
    process.stdin.write(f"{SENTENCES[0]}\n".encode())
    process.stdin.flush()
    read_line(process)
    process.stdout.close()  # the reader stops
    process.stdin.write("".join(f"{s}\n" for s in SENTENCES).encode())
    process.stdin.close()
    assert process.wait(timeout=WAIT) == 0
    assert process.stderr.read() == b""


def test_the_chunks_of_standard_input_are_read_one_at_a_time() -> None:
    "A chunk is cut as soon as its lines are in: no more of the input is read before it is used."
    from annotated_transformer.translator import chunks

    read = []

    def endless():  # a producer that never stops: reading it all first would never end
        for i in itertools.count():
            read.append(i)
            yield f"line {i}"

    found = chunks(endless(), 2)
    assert read == []  # nothing read before the first chunk is asked for
    assert next(found) == ["line 0", "line 1"] and read == [0, 1]
    assert next(found) == ["line 2", "line 3"] and read == [0, 1, 2, 3]
    assert list(chunks(iter(["a", "b", "c"]), 2)) == [["a", "b"], ["c"]]
    assert list(chunks(iter(["a", "b"]), None)) == [["a", "b"]]  # --attention: all at once
    assert list(chunks(iter([]), 2)) == []


# =========================================================================== 2. --output
def test_output_writes_a_new_file_and_never_overwrites_one(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    out = tmp_path / "translations.txt"
    text = f"{SENTENCES[0]}\n\n{SENTENCES[1]}\n"
    done = translate(tiny_checkpoint, "--output", str(out), "--buffer-size", "1", stdin=text)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert out.read_text(encoding="utf-8") == translate(tiny_checkpoint, stdin=text).stdout
    out.write_text("mine\n")
    again = translate(tiny_checkpoint, "--output", str(out), stdin=text)
    assert again.returncode == 2 and again.stdout == ""
    assert one_error_line(again.stderr, "translate").endswith(
        f"--output {out} exists: it is never overwritten"
    )
    assert out.read_text() == "mine\n"


# =========================================================================== 3. --nbest
def beam_search_best(checkpoint: Path, sentence: str, beam: int, k: int) -> list[tuple[str, float]]:
    "What beam_search finds for `sentence`, searched as the command does: (text, score), k best."
    ckpt = load_checkpoint(checkpoint)
    model, (src_tok, tgt_tok) = ckpt.build_model(), ckpt.tokenizers()
    src_vocab, tgt_vocab = ckpt.src_vocab, ckpt.tgt_vocab
    src = torch.tensor([src_vocab.encode_sentence(src_tok.tokenize([sentence])[0])])  # (1, S)
    found = beam_search(
        model,
        src,
        (src != src_vocab.pad).unsqueeze(-2),
        src.size(1) + 50,  # §6.1's limit
        tgt_vocab.bos,
        tgt_vocab.eos,
        beam,
        0.6,
        banned=(tgt_vocab.unk,),
    )[0]
    return [(tgt_tok.detokenize(tgt_vocab.decode(tokens)), score) for tokens, score in found[:k]]


def test_nbest_prints_beam_search_s_best_with_their_scores(tiny_checkpoint: Path) -> None:
    text = f"{SENTENCES[0]}\n\n{SENTENCES[1]}\n"
    args = ["--beam", "4", "--nbest", "3", "--buffer-size", "1"]
    done = translate(tiny_checkpoint, *args, stdin=text)
    assert done.returncode == 0 and done.stderr == ""
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    # none for the blank line 1
    assert [(int(index), len(row)) for index, *row in rows] == [(0, 2)] * 3 + [(2, 2)] * 3
    best = translate(tiny_checkpoint, "--beam", "4", stdin=text).stdout.splitlines()
    assert [rows[0][2], rows[3][2]] == [best[0], best[2]]
    for sentence, found in ((SENTENCES[0], rows[:3]), (SENTENCES[1], rows[3:])):
        scores = [float(score) for _, score, _ in found]
        assert scores == sorted(scores, reverse=True)
        expected = beam_search_best(tiny_checkpoint, sentence, beam=4, k=3)
        assert [text for _, _, text in found] == [text for text, _ in expected]
        # printed to 4 decimals
        assert scores == pytest.approx([score for _, score in expected], abs=1e-4)


def test_nbest_one_of_greedy_search_is_its_translation(tiny_checkpoint: Path) -> None:
    done = translate(tiny_checkpoint, "--nbest", "1", *SENTENCES)
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    assert [(int(index), text) for index, _, text in rows] == list(
        enumerate(translate(tiny_checkpoint, *SENTENCES).stdout.splitlines())
    )
    assert all(float(score) <= 0 for _, score, _ in rows)  # a log-probability


@pytest.mark.parametrize(
    "args", [["--nbest", "2"], ["--beam", "2", "--nbest", "3"]], ids=["greedy", "beam-2"]
)
def test_nbest_beyond_the_beam_is_a_usage_error(args: list[str], tiny_checkpoint: Path) -> None:
    done = translate(tiny_checkpoint, *args, SENTENCES[0])
    assert done.returncode == 2 and done.stdout == ""
    assert "needs beam_size=" in one_error_line(done.stderr, "translate")


# =========================================================================== 4. evaluate --json
def test_evaluate_json_is_sacrebleus_score_with_the_settings(
    tiny_checkpoint: Path, synthetic_corpus: Path, tmp_path: Path
) -> None:
    out = tmp_path / "hypotheses.txt"
    args = ["--checkpoint", str(tiny_checkpoint), "--data-dir", str(synthetic_corpus)]
    done = cli("evaluate", *args, "--beam", "2", "--json", "--output", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (
        result["name"],
        result["data"],
        result["sentences"],
        result["beam"],
        result["alpha"],
        result["average_last"],
        result["allow_unk"],
    ) == ("BLEU", "test2016", 16, 2, 0.6, None, False)  # exact: the settings, copied
    model = load_checkpoint(tiny_checkpoint).build_model()
    assert (result["arch"], result["parameters"]) == ("transformer", count_parameters(model))
    assert result["checkpoint"] == str(tiny_checkpoint)
    references = tmp_path / "references.txt"
    references.write_text("".join(en + "\n" for _, en in synthetic_pairs()[176:]))
    width = ["--width", "2"]  # the score rounded to 2 decimals, as our JSON has it
    reference = subprocess.run(
        [sys.executable, "-m", "sacrebleu", str(references), "-i", str(out), "-m", "bleu", *width],
        capture_output=True,
        text=True,
        timeout=120,
    )
    theirs = json.loads(reference.stdout)
    # exact: sacreBLEU's score of the same files, rounded alike (rounding ours again to 1 decimal
    # would not always give what rounding once does)
    assert result["score"] == theirs["score"]
    assert result["signature"] == theirs["signature"]


# ======================================================================= 5. a run on your own files
def test_evaluate_and_translate_from_the_checkpoint_alone_in_another_folder(
    own_run: Path, own_corpus: dict[str, Path], tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(own_run / "last.pt", elsewhere / "model.pt")
    for name in ("test_src", "test_ref"):
        shutil.copy(own_corpus[name], elsewhere / own_corpus[name].name)
    env = {k: v for k, v in environment().items() if k != "MULTI30K_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "empty-cache")  # no downloaded data either
    evaluate = ["evaluate", "--checkpoint", "model.pt", "--src", "test.xa", "--ref", "test.xb"]
    done = cli(*evaluate, "--output", "test.out", "--quiet", cwd=elsewhere, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("test.xa (10 sentences, greedy): sacreBLEU ")
    assert "tokenized" not in done.stdout  # subwords: no word-level score
    written = (elsewhere / "test.out").read_text(encoding="utf-8").split("\n")
    # ten lines, the empty source's empty
    assert len(written) == 11 and written[3] == "" and written[-1] == ""
    lines = (elsewhere / "test.xa").read_text().splitlines()
    stdin = "\n".join(lines[:5]) + "\n"
    done = cli("translate", "--checkpoint", "model.pt", stdin=stdin, cwd=elsewhere, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:5] == written[:5]  # the same translations, the empty line kept
    again = cli(*evaluate, "--output", "test.out", cwd=elsewhere, env=env)
    assert again.returncode == 2
    assert "--output test.out exists" in one_error_line(again.stderr, "evaluate")


def test_evaluate_refuses_references_of_another_length(
    own_run: Path, own_corpus: dict[str, Path], tmp_path: Path, capsys
) -> None:
    refs = write_lines(tmp_path / "refs", ["ABCß !"] * 4)
    argv = ["evaluate", "--checkpoint", str(own_run / "last.pt")]
    line = refused([*argv, "--src", str(own_corpus["test_src"]), "--ref", str(refs)], 1, capsys)
    assert f"{own_corpus['test_src']} has 10 lines but {refs} has 4" in line


def test_a_checkpoint_without_or_with_an_altered_subword_model_is_refused(
    own_run: Path, tmp_path: Path, capsys
) -> None:
    stored = load_checkpoint(own_run / "last.pt").to_dict()
    without = tmp_path / "without.pt"
    torch.save({k: v for k, v in stored.items() if k != "tokenizer"}, without)
    line = refused(["translate", "--checkpoint", str(without), "kamilo zuré."], 1, capsys)
    assert f"{without} was trained with subwords but holds no subword model" in line
    altered = tmp_path / "altered.pt"
    model_bytes = bytearray(stored["tokenizer"]["model"])
    model_bytes[-1] ^= 1
    torch.save(
        {**stored, "tokenizer": {**stored["tokenizer"], "model": bytes(model_bytes)}}, altered
    )
    line = refused(["translate", "--checkpoint", str(altered), "kamilo zuré."], 1, capsys)
    assert str(altered) in line and "SHA-256" in line
    assert main(["translate", "--checkpoint", str(own_run / "last.pt"), "kamilo zuré."]) == 0
