"""The compiled decoder (`translate --compile`): a cache of fixed size, so that a search's step
(the model's, the ban, log-softmax, the length penalty, max or top-k, the beams' sums) compiles
once. What is checked: greedy and beam search give the tokens of the uncompiled decoder (and scores
within float32 rounding), for a pre-norm and a post-norm model, with sentences of different lengths
leaving the batch at different steps, with banned tokens, a lone sentence of one beam, and after the
weights change in place; each search's step compiles once for every position and row count, in one
graph with no break (once more when its room doubles); the command line gives
the same translations with and without --compile; where it cannot run (no C++ compiler, a
recurrent model, a CTranslate2 folder) it is refused in one line.

Each model compiles once, a few seconds to a minute on a CPU."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch._dynamo.utils import counters

from annotated_transformer.config import ChoiceError, ModelConfig
from annotated_transformer.fast_decoding import (
    Search,
    StaticDecoderCache,
    beam_search,
    compiled_step,
    greedy_search,
)
from annotated_transformer.model import EncoderDecoder
from annotated_transformer.translator import Translator, check_compilable

pytestmark = pytest.mark.skipif(
    sys.platform == "win32", reason="inductor's C++ code for the CPU is built with g++ or clang++"
)
END = 2


def ends_at_varied_lengths(config: ModelConfig, seed: int) -> EncoderDecoder:
    "A random model whose outputs end after a few tokens, some sooner than others."
    torch.manual_seed(seed)
    model = config.build(40, 40).eval()
    with torch.no_grad():
        model.generator.proj.bias[END] += 2.0
    return model


def batch(seed: int, sentences: int = 9) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    "Sources of different lengths (pad 0), their masks and limits (length + 6, one of 1)."
    torch.manual_seed(seed)
    src = torch.randint(4, 40, (sentences, 11))
    for i in range(sentences):
        src[i, 3 + i % 8 :] = 0
    mask = (src != 0).unsqueeze(-2)  # (B, 1, S)
    limits = [int(n) + 6 for n in mask.sum(-1).flatten()]
    limits[1] = 1  # no room after the start symbol
    return src, mask, limits


MODELS = {
    "pre-norm": ModelConfig(N=2, d_model=32, d_ff=64, h=4, dropout=0.0, norm_first=True),
    "post-norm, learned positions": ModelConfig(
        N=2, d_model=32, d_ff=64, h=4, dropout=0.0, norm_first=False, positions="learned"
    ),
}


@pytest.mark.parametrize("name", MODELS)
def test_compiled_searches_give_the_uncompiled_tokens(name: str) -> None:
    model = ends_at_varied_lengths(MODELS[name], seed=1)
    for seed in (0, 1):
        src, mask, limits = batch(seed)
        cached = greedy_search(model, src, mask, limits, 1, END)
        compiled = greedy_search(model, src, mask, limits, 1, END, compiled=True)
        assert [h.tokens for h in compiled] == [h.tokens for h in cached]
        lengths = {len(h.tokens) for h in cached}
        assert len(lengths) >= 3, lengths  # sentences leave the batch at different steps
        for a, b in zip(compiled, cached):
            assert abs(a.score - b.score) < 1e-4
        cached = beam_search(model, src, mask, limits, 1, END, beam_size=3)
        compiled = beam_search(model, src, mask, limits, 1, END, beam_size=3, compiled=True)
        assert [[h.tokens for h in hs] for hs in compiled] == [
            [h.tokens for h in hs] for hs in cached
        ]
        for hs, gs in zip(compiled, cached):
            assert all(abs(h.score - g.score) < 1e-4 for h, g in zip(hs, gs))


def test_each_search_compiles_once_for_each_room_whatever_the_position_and_rows() -> None:
    torch.manual_seed(2)
    model = MODELS["pre-norm"].build(40, 40).eval()  # untrained: it runs to its limits
    torch._dynamo.reset()
    compiled_step.cache_clear()
    counters.clear()
    for sentences in (9, 5, 3, 16):  # rows leave, beams reorder them, batches differ in size
        src, mask, limits = batch(sentences, sentences)
        greedy_search(model, src, mask, limits, 1, END, compiled=True)
        beam_search(model, src, mask, limits, 1, END, beam_size=4, compiled=True)
    # a room of 32: one graph for each search's whole step, none broken
    assert max(limits) <= 32 and counters["stats"]["unique_graphs"] == 2
    assert not counters["graph_break"], dict(counters["graph_break"])
    greedy_search(model, src, mask, 40, 1, END, compiled=True)  # 39 positions: a room of 64
    assert counters["stats"]["unique_graphs"] == 3, dict(counters["stats"])


def test_banned_tokens_and_a_lone_beam_compile_as_they_search() -> None:
    "The ban is in the compiled step; a search of one sentence and one beam runs its row twice."
    model = ends_at_varied_lengths(MODELS["pre-norm"], seed=4)
    src, mask, limits = batch(5)
    banned = (END + 1, 7, 11)
    for search, how in ((greedy_search, {}), (beam_search, dict(beam_size=3, alpha=1.0))):
        eager = search(model, src, mask, limits, 1, END, banned=banned, **how)
        fast = search(model, src, mask, limits, 1, END, banned=banned, compiled=True, **how)
        flat = lambda found: [h for x in found for h in (x if isinstance(x, list) else [x])]
        assert [h.tokens for h in flat(fast)] == [h.tokens for h in flat(eager)]
        assert all(abs(a.score - b.score) < 1e-4 for a, b in zip(flat(fast), flat(eager)))
        assert not {t for h in flat(fast) for t in h.tokens} & set(banned)
    one, one_mask = src[:1], mask[:1]
    eager = beam_search(model, one, one_mask, 9, 1, END, beam_size=1)
    fast = beam_search(model, one, one_mask, 9, 1, END, beam_size=1, compiled=True)
    assert [h.tokens for h in fast[0]] == [h.tokens for h in eager[0]]
    assert abs(fast[0][0].score - eager[0][0].score) < 1e-4


def test_a_change_to_the_weights_is_seen_by_the_compiled_step() -> None:
    "The weights are the compiled code's inputs, not constants: loading others takes effect."
    model = ends_at_varied_lengths(MODELS["pre-norm"], seed=3)
    src, mask, limits = batch(3)
    before = greedy_search(model, src, mask, limits, 1, END, compiled=True)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    cached = greedy_search(model, src, mask, limits, 1, END)
    compiled = greedy_search(model, src, mask, limits, 1, END, compiled=True)
    assert [h.score for h in compiled] != [h.score for h in before]
    assert [h.tokens for h in compiled] == [h.tokens for h in cached]
    assert all(abs(a.score - b.score) < 1e-4 for a, b in zip(compiled, cached))


def test_the_static_cache_pads_the_source_and_doubles_its_room() -> None:
    model = MODELS["pre-norm"].build(40, 40).eval()
    memory, mask = torch.randn(3, 11, 32), torch.ones(3, 1, 11, dtype=torch.bool)
    cache = StaticDecoderCache(model, memory, mask, beams=2)
    assert (cache.room, cache.rows, cache.src_mask.shape) == (32, 6, (6, 1, 1, 32))
    assert not cache.src_mask[..., 11:].any() and cache.src_mask[..., :11].all()
    keys = cache.layers[0].keys.normal_().clone()
    cache.grow()
    grown = cache.layers[0].keys  # (6, h, 64, d_k): the positions kept, then zeros
    # exact: the positions kept are copies
    assert cache.room == 64 and torch.equal(grown[:, :, :32], keys) and not grown[:, :, 32:].any()


def test_compile_is_refused_in_one_line_where_it_cannot_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from annotated_transformer.recurrent import RecurrentConfig

    model = MODELS["pre-norm"].build(40, 40).eval()
    check_compilable(model)  # here: a Transformer, and a compiler
    lstm = RecurrentConfig(d_emb=16, d_hidden=16).build(40, 40)
    with pytest.raises(ChoiceError, match="compiles a Transformer's decoder, not Recurrent"):
        check_compilable(lstm)
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(ChoiceError, match=r"needs a C\+\+ compiler \(g\+\+, clang\+\+ or \$CXX\)"):
        check_compilable(model)


def test_translate_compile_gives_the_same_translations(tiny_checkpoint: Path) -> None:
    sentences = ["Ein Hund läuft.", "Zwei Männer spielen Fußball im Park.", "Eine Frau."]
    plain = Translator.from_checkpoint(tiny_checkpoint)
    for search in (Search(), Search(beam_size=4)):
        fast = plain.translate(sentences, dataclasses.replace(search, compile=True))
        assert fast == plain.translate(sentences, search)
    command = [sys.executable, "-m", "annotated_transformer.cli", "translate"]
    command += ["--checkpoint", str(tiny_checkpoint)]
    runs = [
        subprocess.run([*command, *flags, *sentences], capture_output=True, text=True, timeout=600)
        for flags in ([], ["--compile"])
    ]
    assert all(r.returncode == 0 for r in runs), runs[1].stderr[-2000:]
    assert runs[1].stdout == runs[0].stdout and len(runs[0].stdout.splitlines()) == 3


def test_ctranslate2_refuses_compile(tiny_checkpoint: Path, tmp_path: Path) -> None:
    pytest.importorskip("ctranslate2")
    from annotated_transformer.checkpoint import load_checkpoint
    from annotated_transformer.engines import ExportedTranslator, export_model

    folder = export_model(load_checkpoint(tiny_checkpoint), tmp_path / "ct2")
    engine = ExportedTranslator.from_dir(folder)
    with pytest.raises(ChoiceError, match="CTranslate2's is compiled already"):
        engine.translate(["Ein Hund."], Search(compile=True))
    assert os.path.isdir(folder)


@pytest.mark.parametrize(
    "env, says",
    [
        ({"CXX": "/bin/false"}, "the C++ compiler /bin/false does not build a program (exit 1)"),
        ({"TORCHINDUCTOR_CACHE_DIR": "/proc"}, "cannot write the compiler's cache /proc ("),
    ],
    ids=["a compiler that fails", "a cache it cannot write"],
)
def test_compile_that_cannot_build_is_one_line_before_any_work(
    tiny_checkpoint: Path, synthetic_corpus: Path, tmp_path: Path, env: dict, says: str
) -> None:
    "Round four: both ended in inductor's 'internal error'; train and translate refuse at once."
    from clitools import cli, environment, one_error_line

    run = tmp_path / "run"
    commands = {
        "translate": ["--checkpoint", str(tiny_checkpoint), "--compile", "Ein Hund."],
        "train": ["--out", str(run), "--data-dir", str(synthetic_corpus), "--compile", "--quiet"],
    }
    for command, argv in commands.items():
        done = cli(command, *argv, env={**environment(), **env})
        assert done.returncode == 2, done.stderr
        assert says in one_error_line(done.stderr, command)
    assert not run.exists()  # refused before the run's folder was made
