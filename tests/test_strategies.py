"""The change plan "a new decoding strategy", carried out end to end: one entry in
`fast_decoding.STRATEGIES` and its code, and nothing else changes. A `Search` names the strategy
(`--strategy` on the command line, a field like any other); the translator of a trained checkpoint
runs it; CTranslate2, which cannot, refuses it in one line, in Python and on the command line; an
unknown name is refused with the names the table holds.

The strategy tried is ancestral sampling: each next token drawn from the model's distribution,
seeded so that the test can compare runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from annotated_transformer import fast_decoding
from annotated_transformer.checkpoint import load_checkpoint
from annotated_transformer.cli import main
from annotated_transformer.config import ChoiceError
from annotated_transformer.decoding import Hypothesis
from annotated_transformer.engines import ExportedTranslator, export_model
from annotated_transformer.fast_decoding import Search, banned_tokens, begin_decoding
from annotated_transformer.translator import Translator

SENTENCES = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee."]


def sample(model, src, src_mask, limits, tgt_vocab, search) -> list[list[Hypothesis]]:
    "Ancestral sampling, seeded: each sentence's one sample and its log-probability."
    generator = torch.Generator().manual_seed(0)
    decoder = begin_decoding(model, src, src_mask)
    y = torch.full((src.size(0),), tgt_vocab.bos, dtype=torch.long)  # (B,)
    found = [Hypothesis([], 0.0) for _ in limits]
    done = [limit <= 1 for limit in limits]
    for t in range(1, max(limits)):
        logp = decoder.step(y)  # (B, V)
        logp[:, list(banned_tokens(tgt_vocab, search))] = -torch.inf
        y = torch.multinomial(logp.softmax(-1), 1, generator=generator).squeeze(1)
        for i, token in enumerate(y.tolist()):
            if not done[i]:
                tokens, score = found[i]
                found[i] = Hypothesis([*tokens, token], score + logp[i, token].item())
                done[i] = token == tgt_vocab.eos or t + 1 >= limits[i]
        if all(done):
            break
    return [[h] for h in found]


@pytest.fixture
def with_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
    "The table with one more entry: the whole of the change."
    monkeypatch.setitem(fast_decoding.STRATEGIES, "sample", sample)


def test_a_new_strategy_is_one_table_entry(with_sampling, tiny_checkpoint: Path) -> None:
    translator = Translator.from_checkpoint(tiny_checkpoint)
    sampled = translator.translate(SENTENCES, Search(strategy="sample"))
    assert sampled == translator.translate(SENTENCES, Search(strategy="sample"))  # seeded
    assert all(tokens and "<unk>" not in tokens for tokens in sampled)
    greedy = translator.translate(SENTENCES)
    assert sampled != greedy  # another search ran, not greedy search under a new name
    assert translator.translate(SENTENCES, Search(strategy="greedy")) == greedy


def test_the_command_line_runs_it_by_name(with_sampling, tiny_checkpoint: Path, capsys) -> None:
    expected = Translator.from_checkpoint(tiny_checkpoint)
    sampled = expected.translate(SENTENCES[:1], Search(strategy="sample"))[0]
    argv = ["translate", "--checkpoint", str(tiny_checkpoint), "--strategy", "sample"]
    assert main([*argv, SENTENCES[0]]) == 0
    assert capsys.readouterr().out == expected.detokenize(sampled) + "\n"


def test_an_engine_that_cannot_run_it_refuses_it_in_one_line(
    with_sampling, tiny_checkpoint: Path, tmp_path: Path, capsys
) -> None:
    folder = export_model(load_checkpoint(tiny_checkpoint), tmp_path / "ct2")
    engine = ExportedTranslator.from_dir(folder, threads=1)
    with pytest.raises(ChoiceError, match="^CTranslate2 cannot run the sample strategy"):
        engine.translate(SENTENCES, Search(strategy="sample"))
    argv = ["translate", "--checkpoint", str(folder), "--strategy", "sample", SENTENCES[0]]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "annotated-transformer translate: error: CTranslate2 cannot run the sample strategy: "
        "use --engine pytorch"
    )


def test_an_unknown_strategy_is_refused_by_name(tiny_checkpoint: Path, capsys) -> None:
    translator = Translator.from_checkpoint(tiny_checkpoint)
    with pytest.raises(
        ChoiceError, match=r"^strategy 'sample': choose one of greedy, beam, trees$"
    ):
        translator.translate(SENTENCES, Search(strategy="sample"))
    argv = ["translate", "--checkpoint", str(tiny_checkpoint), "--strategy", "nope", "Ein Hund."]
    assert main(argv) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("strategy 'nope': choose one of greedy, beam, trees")
    )
