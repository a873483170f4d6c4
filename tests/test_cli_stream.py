"""Tests for `annotated-transformer translate` in a shell pipeline (annotated_transformer/cli.py), through the real command.

It streams standard input: every --buffer-size lines are translated and printed (flushed) as they arrive, a line
out for a line in, blank for blank; --output writes a new file instead; --nbest K prints beam search's K best of
each sentence as `INDEX<TAB>SCORE<TAB>TRANSLATION`. Each test runs `python -m annotated_transformer.cli translate`.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from annotated_transformer.checkpoint import (
    load_checkpoint,
    model_from_checkpoint,
    tokenizers_from_checkpoint,
)
from annotated_transformer.data import tokenize_all
from annotated_transformer.decoding import beam_search
from annotated_transformer.translation import detokenize


SENTENCES = [
    "Ein Mann sieht einen Ball.",
    "Zwei Männer sehen ein Auto im Schnee.",
    "Ein Hund trägt einen Hut.",
]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
WAIT = 120  # seconds a line may take to come back: Python, PyTorch and the model load first


def command(checkpoint: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "annotated_transformer.cli",
        "translate",
        "--checkpoint",
        str(checkpoint),
        *args,
    ]


def translate(checkpoint: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    "Run the command with `stdin` on its standard input, to the end; its output captured as text."
    return subprocess.run(
        command(checkpoint, *args),
        input=stdin,
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=ENV,
        timeout=300,
    )


def one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("annotated-transformer translate: error: "), err
    return lines[0]


def read_line(process: subprocess.Popen, seconds: float = WAIT) -> str:
    "The next line of the process's standard output, waiting at most `seconds` for it (a failure, not a hang, when it does not come)."
    fd, line, deadline = process.stdout.fileno(), b"", time.monotonic() + seconds
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                pytest.fail(f"no line on standard output within {seconds} s (so far {line!r})")
            byte = os.read(fd, 1)  # a byte at a time: nothing past the line is taken from the pipe
            if not byte:
                pytest.fail(
                    f"standard output closed before a whole line: {line!r}; {process.stderr.read().decode()}"
                )
            line += byte
    return line.decode()


@pytest.fixture
def streaming(tiny_checkpoint: Path):
    "A factory of running `translate` commands with pipes on all three streams; any still running at the end is killed."
    started = []

    def start(*args: str) -> subprocess.Popen:
        started.append(
            subprocess.Popen(
                command(tiny_checkpoint, *args),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=ENV,
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


# =========================================================================== streaming
def test_each_line_is_translated_before_standard_input_ends(
    tiny_checkpoint: Path, streaming
) -> None:
    expected = translate(tiny_checkpoint, *SENTENCES[:2]).stdout.splitlines()
    process = streaming("--buffer-size", "1")
    for sentence, translation in zip(SENTENCES[:2], expected):
        process.stdin.write(f"{sentence}\n".encode())
        process.stdin.flush()  # and the pipe stays open: the translation must come without the end of the input
        assert read_line(process) == translation + "\n"
    process.stdin.close()
    assert process.wait(timeout=WAIT) == 0
    assert process.stdout.read() == b"" and process.stderr.read() == b""


def test_blank_lines_stay_in_place_whatever_the_buffer_size(tiny_checkpoint: Path) -> None:
    text = f"\n{SENTENCES[0]}\n\n  \n{SENTENCES[1]}\r\n{SENTENCES[2]}\n\n"
    one_by_one = translate(tiny_checkpoint, *SENTENCES).stdout.splitlines()
    outputs = {
        size: translate(tiny_checkpoint, "--buffer-size", size, stdin=text)
        for size in ("2", "1000")
    }
    for size, done in outputs.items():
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
    "The chunks before it are already printed; the line counts from the start of the input, not of its chunk."
    stdin = f"{SENTENCES[0]}\n\n{SENTENCES[1]}\n".encode() + b"Ein \xff Hund.\n"
    done = subprocess.run(
        command(tiny_checkpoint, "--buffer-size", "2"),
        input=stdin,
        capture_output=True,
        env=ENV,
        timeout=300,
    )
    assert done.returncode == 1
    assert done.stdout.decode().split("\n") == [
        translate(tiny_checkpoint, SENTENCES[0]).stdout.strip(),
        "",
        "",
    ]
    assert one_error_line(done.stderr.decode()).endswith(
        "standard input, line 4: byte 0xff at position 5 is not UTF-8 text"
    )


def test_a_reader_that_stops_early_stops_the_command_quietly(streaming) -> None:
    "Like `annotated-transformer translate < big.txt | head -1`: no error message, status 0, once the reader is gone."
    process = streaming("--buffer-size", "1")
    process.stdin.write(f"{SENTENCES[0]}\n".encode())
    process.stdin.flush()
    read_line(process)
    process.stdout.close()  # the reader stops
    process.stdin.write("".join(f"{s}\n" for s in SENTENCES).encode())
    process.stdin.close()
    assert process.wait(timeout=WAIT) == 0
    assert process.stderr.read() == b""


# =========================================================================== --output
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
    assert one_error_line(again.stderr).endswith(
        f"--output {out} exists: choose another name or delete it (it is never overwritten)"
    )
    assert out.read_text() == "mine\n"


# =========================================================================== --nbest
def beam_search_best(checkpoint: Path, sentence: str, beam: int, k: int) -> list[tuple[str, float]]:
    "What `beam_search` itself finds for `sentence`, as the command searches (§6.1's limit, <unk> banned): (text, score), k best."
    ckpt = load_checkpoint(checkpoint)
    model, src_vocab, tgt_vocab = model_from_checkpoint(ckpt)
    src_tok, tgt_tok = tokenizers_from_checkpoint(ckpt)
    src = torch.tensor(
        [src_vocab.encode_sentence(tokenize_all([sentence], src_tok, progress=False)[0])]
    )  # (1, S)
    found = beam_search(
        model.eval(),
        src,
        (src != src_vocab.pad).unsqueeze(-2),
        src.size(1) + 50,
        tgt_vocab.bos,
        tgt_vocab.eos,
        beam,
        0.6,
        banned=(tgt_vocab.unk,),
    )[0]
    return [(detokenize(tgt_vocab.decode(tokens), tgt_tok), score) for tokens, score in found[:k]]


def test_nbest_prints_beam_search_s_best_with_their_scores(tiny_checkpoint: Path) -> None:
    text = f"{SENTENCES[0]}\n\n{SENTENCES[1]}\n"
    done = translate(
        tiny_checkpoint, "--beam", "4", "--nbest", "3", "--buffer-size", "1", stdin=text
    )
    assert done.returncode == 0 and done.stderr == ""
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    assert [(int(index), len(row)) for index, *row in rows] == [(0, 2)] * 3 + [
        (2, 2)
    ] * 3  # none for the blank line 1
    best = translate(tiny_checkpoint, "--beam", "4", stdin=text).stdout.splitlines()
    assert [rows[0][2], rows[3][2]] == [best[0], best[2]]
    for sentence, found in ((SENTENCES[0], rows[:3]), (SENTENCES[1], rows[3:])):
        scores = [float(score) for _, score, _ in found]
        assert scores == sorted(scores, reverse=True)
        expected = beam_search_best(tiny_checkpoint, sentence, beam=4, k=3)
        assert [text for _, _, text in found] == [text for text, _ in expected]
        assert scores == pytest.approx(
            [score for _, score in expected], abs=1e-4
        )  # printed to 4 decimals


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
    assert "needs --beam" in one_error_line(done.stderr)
