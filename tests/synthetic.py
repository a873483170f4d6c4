"""Synthetic German-English sentence pairs for the tests, and Multi30k-named .gz files of them."""

from __future__ import annotations

import gzip
import itertools
import random
from pathlib import Path

from annotated_transformer.data import split_files

SUBJECTS = [("Ein Mann", "A man"), ("Eine Frau", "A woman"), ("Ein Kind", "A child"), ("Ein Hund", "A dog")]
VERBS = [("sieht", "sees"), ("hat", "has"), ("mag", "likes")]
OBJECTS = [("einen Ball", "a ball"), ("ein Auto", "a car"), ("einen Baum", "a tree"), ("ein Haus", "a house")]
PLACES = [("", ""), (" im Park", " in the park"), (" am Strand", " on the beach"), (" im Schnee", " in the snow")]


def synthetic_pairs() -> list[tuple[str, str]]:
    "192 distinct, consistent German-English sentence pairs."
    pairs = [
        (f"{s_de} {v_de} {o_de}{p_de}.", f"{s_en} {v_en} {o_en}{p_en}.")
        for (s_de, s_en), (v_de, v_en), (o_de, o_en), (p_de, p_en) in itertools.product(SUBJECTS, VERBS, OBJECTS, PLACES)
    ]
    random.Random(0).shuffle(pairs)
    return pairs


def write_split(folder: Path, split: str, pairs: list[tuple[str, str]]) -> None:
    de_name, en_name = split_files(split)
    for name, side in ((de_name, 0), (en_name, 1)):
        with gzip.open(folder / name, "wt", encoding="utf-8") as f:
            f.write("".join(p[side] + "\n" for p in pairs))
