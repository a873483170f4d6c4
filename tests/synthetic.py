"""Synthetic German-English sentence pairs for the tests, and Multi30k-named .gz files of them.

`synthetic_pairs` (a fixed set of 192, which the notebooks use too) and `write_split` come from
`annotated_transformer._chapters`; `sampled_pairs` draws any number of pairs of more varied length.
"""

from __future__ import annotations

import random

from annotated_transformer._chapters import synthetic_pairs, write_split

__all__ = ["sampled_pairs", "synthetic_pairs", "write_split"]

SUBJECTS = [
    ("Ein Mann", "A man"),
    ("Eine Frau", "A woman"),
    ("Ein Kind", "A child"),
    ("Ein Hund", "A dog"),
    ("Zwei Männer", "Two men"),
    ("Drei Mädchen", "Three girls"),
    ("Ein alter Mann", "An old man"),
]
VERBS = [
    ("fährt", "rides"),
    ("sieht", "sees"),
    ("trägt", "carries"),
    ("sucht", "looks for"),
    ("malt", "paints"),
]
OBJECTS = [
    ("ein Fahrrad", "a bike"),
    ("einen Ball", "a ball"),
    ("ein rotes Auto", "a red car"),
    ("eine große Tasche", "a big bag"),
    ("einen kleinen Hut", "a small hat"),
]
PLACES = [
    ("", ""),
    (" im Park", " in the park"),
    (" am Strand", " on the beach"),
    (" auf der Straße vor dem alten Haus", " on the street in front of the old house"),
]


def sampled_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    "n distinct (German, English) sentence pairs of 5 to 16 words, drawn from 700 and deterministic in `seed`."
    combos = [(s, v, o, p) for s in SUBJECTS for v in VERBS for o in OBJECTS for p in PLACES]
    if not 0 <= n <= len(combos):
        raise ValueError(f"n={n}: there are {len(combos)} distinct pairs to draw from")
    return [
        (f"{s[0]} {v[0]} {o[0]}{p[0]}.", f"{s[1]} {v[1]} {o[1]}{p[1]}.")
        for s, v, o, p in random.Random(seed).sample(combos, n)
    ]
