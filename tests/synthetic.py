"""The tests' shared helpers: the synthetic corpora and files of them, tiny models, and the
project's tools loaded as modules.

The German-English ones live in `annotated_transformer._chapters`, which the notebooks use too:
`synthetic_pairs` (a fixed set of 192 pairs), `sampled_pairs` (any number of pairs of more varied
length) and `write_split` (Multi30k-named .gz files). `made_up_pairs` makes parallel text in two
made-up languages, for runs on your own files; `write_lines` writes any lines, plain or gzipped.
`tool("render")` is tools/render.py as a module, for the tests of the tools.
"""

from __future__ import annotations

import gzip
import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

from annotated_transformer._chapters import sampled_pairs, synthetic_pairs, write_split
from annotated_transformer.model import ModelConfig

__all__ = [
    "made_up_pairs",
    "sampled_pairs",
    "synthetic_pairs",
    "write_lines",
    "write_split",
    "TINY_VOCAB",
    "tiny_model",
    "params",
    "assert_params_equal",
    "tool",
]

SYLLABLES = ["ka", "lo", "mi", "zu", "ré", "tan", "vø", "shi", "por", "el"]


def made_up_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    "Sentences of a made-up language and their translations: each word its own, in reverse order."
    rng = random.Random(seed)
    words = sorted({"".join(rng.sample(SYLLABLES, 2)) for _ in range(60)})
    # a second spelling system, with a non-ASCII letter
    other = {w: w[::-1].upper()[:3] + "ß" + w[:1] for w in words}
    pairs = []
    for _ in range(n):
        sentence = rng.sample(words, rng.randint(3, 7))
        pairs.append(
            (" ".join(sentence) + ".", " ".join(other[w] for w in reversed(sentence)) + " !")
        )
    return pairs


def write_lines(path: Path, lines: list[str], gzipped: bool = False) -> Path:
    "Write `lines`, one a line, to `path` (gzipped if asked); return the path."
    data = "".join(line + "\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if gzipped else data)
    return path


# ------------------------------------------------ tiny models (tests of the training loops, losses)
TINY_VOCAB = 11  # the tiny models' vocabulary: 0 padding, 1 start, 2..10 content


def tiny_model(seed: int = 0) -> nn.Module:
    "A one-layer model (d_model 16, no dropout) over TINY_VOCAB tokens; `seed` draws its weights."
    torch.manual_seed(seed)
    return ModelConfig(N=1, d_model=16, d_ff=32, h=2, dropout=0.0).build(TINY_VOCAB, TINY_VOCAB)


def params(model: nn.Module) -> list[torch.Tensor]:
    "A copy of the model's parameters, to compare with later."
    return [p.detach().clone() for p in model.parameters()]


def assert_params_equal(a: list[torch.Tensor], b: list[torch.Tensor], atol: float = 0.0) -> None:
    "Two lists of parameters hold the same tensors, to `atol`."
    assert len(a) == len(b)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, atol=atol, rtol=0.0)


# ------------------------------------------------------------------------- the tools, as modules
TOOLS = Path(__file__).resolve().parent.parent / "tools"


def tool(name: str) -> ModuleType:
    "tools/NAME.py as a module (the tools are scripts beside the book, not a package)."
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # where its dataclasses look up their annotations
    spec.loader.exec_module(module)
    return module
