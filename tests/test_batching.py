"""Tests for annotated_transformer.batching: sentence pairs as padded batches (Section 5.1).

What is checked:
1. `Batch`: shapes, the tgt/tgt_y shift, the masks, the token count, `.to()`, `pad` as a required
   keyword, and clear errors.
2. `TokenBatchSampler`: a partition of the examples within the token budget, determinism per
   (seed, epoch), sorted batches without shuffling, sharding over processes, and clear errors.
3. `copy_task_batches`: shapes, values and determinism, made one batch at a time.
4. `collate` and `make_loader` on encoded sentence pairs: every pair exactly once per epoch, the
   token budget, padding and masks, epochs and data-parallel shards.

Everything runs on a CPU in a few seconds and needs no data or network.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from synthetic import sampled_pairs

from annotated_transformer.batching import Batch, collate, copy_task_batches
from annotated_transformer.data import (
    TokenBatchSampler,
    Vocab,
    encode_pairs,
    load_tokenizers,
    make_loader,
)

V = 11  # vocabulary of the copy task: 0 padding, 1 start, 2..10 content


# =========================================================================== 1. Batch


def test_batch_shapes_shift_masks_and_ntokens():
    src = torch.tensor([[1, 5, 6, 7, 0], [1, 8, 0, 0, 0]])
    tgt = torch.tensor([[1, 3, 4, 5], [1, 9, 0, 0]])
    b = Batch(src, tgt, pad=0)
    assert b.src is src
    assert b.src_mask.shape == (2, 1, 5) and b.src_mask.dtype == torch.bool
    torch.testing.assert_close(
        b.src_mask,
        torch.tensor([[[True, True, True, True, False]], [[True, True, False, False, False]]]),
    )
    torch.testing.assert_close(b.tgt, tgt[:, :-1])
    torch.testing.assert_close(b.tgt_y, tgt[:, 1:])
    assert b.tgt.shape == b.tgt_y.shape == (2, 3)
    assert b.tgt_mask.shape == (2, 3, 3) and b.tgt_mask.dtype == torch.bool
    # built by hand: query i may see key j iff j <= i and tgt[j] is not padding
    expected = torch.zeros(2, 3, 3, dtype=torch.bool)
    for bi in range(2):
        for i in range(3):
            for j in range(3):
                expected[bi, i, j] = j <= i and b.tgt[bi, j].item() != 0
    torch.testing.assert_close(b.tgt_mask, expected)
    assert b.ntokens == 3 + 1  # non-padding labels: [3, 4, 5] and [9]
    assert isinstance(b.ntokens, int)


def test_batch_source_only_with_pad_a_required_keyword():
    src = torch.tensor([[1, 4, 2, 2]])
    b = Batch(src, pad=2)
    torch.testing.assert_close(b.src_mask, torch.tensor([[[True, True, False, False]]]))
    assert not hasattr(b, "tgt") and not hasattr(b, "ntokens")
    with pytest.raises(TypeError, match="keyword-only argument: 'pad'"):
        Batch(src)  # no default: the padding id belongs to the vocabulary
    with pytest.raises(TypeError, match="positional"):
        Batch(src, src, 2)  # keyword only


def test_batch_to_moves_every_tensor():
    src = torch.tensor([[1, 5, 6, 0], [1, 8, 0, 0]])
    tgt = torch.tensor([[1, 3, 4], [1, 9, 0]])
    b = Batch(src, tgt, pad=0)
    before = {name: v for name, v in vars(b).items() if isinstance(v, torch.Tensor)}
    assert set(before) == {"src", "src_mask", "tgt", "tgt_y", "tgt_mask"}
    out = b.to("meta")  # a device every machine has, and one a tensor cannot be on by accident
    assert out is b
    for name, v in before.items():
        moved = getattr(b, name)
        assert moved.device.type == "meta", name
        assert (moved.shape, moved.dtype) == (v.shape, v.dtype)
    assert b.ntokens == 3  # labels [3, 4] and [9, pad]: counted before the move, kept


def test_make_tgt_mask_hides_padding_and_the_future():
    tgt = torch.tensor([[1, 3, 0], [1, 0, 0]])
    mask = Batch.make_tgt_mask(tgt, pad=0)
    assert mask.shape == (2, 3, 3) and mask.dtype == torch.bool
    torch.testing.assert_close(
        mask[0], torch.tensor([[True, False, False], [True, True, False], [True, True, False]])
    )
    torch.testing.assert_close(mask[1], torch.tensor([[True, False, False]] * 3))


@pytest.mark.parametrize(
    "src",
    [
        torch.zeros(0, 5, dtype=torch.long),
        torch.zeros(3, 0, dtype=torch.long),
        torch.tensor([1, 2, 3]),
    ],
)
def test_batch_rejects_empty_or_non_2d_source(src):
    with pytest.raises(ValueError, match="empty batch"):
        Batch(src, None, pad=0)


def test_batch_rejects_all_padding_targets():
    src = torch.tensor([[1, 5], [1, 6]])
    tgt = torch.tensor([[1, 0, 0], [1, 0, 0]])
    with pytest.raises(ValueError, match="every target token .* is padding"):
        Batch(src, tgt, pad=0)


@pytest.mark.parametrize(
    "tgt",
    [
        torch.tensor([[1, 3, 4]]),
        torch.tensor([[1], [1]]),
        torch.tensor([1, 3, 4]),
        torch.tensor([[1, 3], [1, 4], [1, 5]]),
    ],
    ids=["batch-too-small", "length-1", "1d", "batch-too-large"],
)
def test_batch_rejects_mismatched_or_short_target(tgt):
    src = torch.tensor([[1, 5, 6], [1, 7, 8]])
    with pytest.raises(ValueError, match=r"tgt must be \(batch=2, length >= 2\)"):
        Batch(src, tgt, pad=0)


# =========================================================================== 2. TokenBatchSampler


def random_lengths(n: int = 300, seed: int = 0) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, 40, (n,), generator=g).tolist()


def batch_cost(batch: list[int], lengths: list[int]) -> int:
    return len(batch) * max(lengths[i] for i in batch)


@pytest.mark.parametrize("shuffle", [True, False])
def test_sampler_partitions_examples_within_budget(shuffle):
    lengths = random_lengths() + [150, 64, 65]  # one longer than the budget, one exactly at it
    max_tokens = 64
    s = TokenBatchSampler(lengths, max_tokens, shuffle=shuffle, seed=3)
    for epoch in range(3):
        s.set_epoch(epoch)
        batches = list(s)
        flat = [i for b in batches for i in b]
        assert sorted(flat) == list(range(len(lengths)))  # every index exactly once
        assert all(len(b) > 0 for b in batches)
        assert len(batches) == len(s)
        for b in batches:
            if batch_cost(b, lengths) > max_tokens:
                # only an example longer than the budget may exceed it, alone in its batch
                assert len(b) == 1 and lengths[b[0]] > max_tokens
        # the examples longer than the budget are alone
        for long in (len(lengths) - 3, len(lengths) - 1):
            (home,) = [b for b in batches if long in b]
            assert home == [long]
        # an example exactly at the budget fits, alone
        (home,) = [b for b in batches if len(lengths) - 2 in b]
        assert home == [len(lengths) - 2]


@pytest.mark.parametrize("shuffle", [True, False])
def test_sampler_examples_all_over_budget_are_alone(shuffle):
    lengths = [10, 20, 15, 12]  # even the shortest exceeds the budget
    s = TokenBatchSampler(lengths, 5, shuffle=shuffle)
    batches = list(s)
    assert len(batches) == len(s) == 4
    assert sorted(batches) == [[0], [1], [2], [3]]  # one example per batch, and no empty batch


def test_sampler_packs_greedily_without_shuffle():
    lengths = random_lengths()
    max_tokens = 64
    batches = list(TokenBatchSampler(lengths, max_tokens, shuffle=False))
    flat = [i for b in batches for i in b]
    # sorted by length, ties by index (a stable sort)
    assert flat == sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    # each batch is full: the next example would not have fitted
    for b, nxt in zip(batches, batches[1:]):
        longest = max(lengths[i] for i in b + [nxt[0]])
        assert (len(b) + 1) * longest > max_tokens
    # and a deterministic result with no dependence on the seed or epoch
    s = TokenBatchSampler(lengths, max_tokens, shuffle=False, seed=99)
    s.set_epoch(5)
    assert list(s) == batches


def test_sampler_is_deterministic_per_seed_and_epoch():
    lengths = random_lengths()
    a = TokenBatchSampler(lengths, 80, seed=1)
    b = TokenBatchSampler(lengths, 80, seed=1)
    for epoch in (0, 1, 7):
        a.set_epoch(epoch)
        b.set_epoch(epoch)
        assert list(a) == list(b)
        assert list(a) == list(a)  # iterating again gives the same epoch
    a.set_epoch(0)
    e0 = list(a)
    a.set_epoch(1)
    e1 = list(a)
    assert e0 != e1
    assert sorted(map(sorted, e0)) != sorted(
        map(sorted, e1)
    )  # new tie-breaks, not only a new batch order
    c = TokenBatchSampler(lengths, 80, seed=2)
    assert list(c) != e0  # epoch 0 of another seed


def test_sampler_shuffled_batches_hold_similar_lengths():
    lengths = random_lengths()
    shuffled = list(TokenBatchSampler(lengths, 80, seed=4))
    ordered = list(TokenBatchSampler(lengths, 80, shuffle=False))
    assert [b for b in shuffled] != ordered
    # the same batch sizes by length class: shuffling only reorders batches and breaks ties among
    # equal lengths
    key = lambda bs: sorted(tuple(sorted(lengths[i] for i in b)) for b in bs)  # noqa: E731
    assert key(shuffled) == key(ordered)


@pytest.mark.parametrize("num_replicas", [2, 3])
def test_sampler_shards_over_processes(num_replicas):
    lengths = random_lengths(n=301, seed=5)
    max_tokens = 70
    full = TokenBatchSampler(lengths, max_tokens, seed=8)
    full.set_epoch(2)
    all_batches = list(full)
    usable = len(all_batches) - len(all_batches) % num_replicas
    shards = []
    for rank in range(num_replicas):
        s = TokenBatchSampler(lengths, max_tokens, seed=8, num_replicas=num_replicas, rank=rank)
        s.set_epoch(2)
        shard = list(s)
        assert len(shard) == len(s) == len(all_batches) // num_replicas
        shards.append(shard)
    assert len({len(sh) for sh in shards}) == 1  # equal counts per rank
    as_sets = [{tuple(b) for b in sh} for sh in shards]
    for i in range(num_replicas):
        for j in range(i + 1, num_replicas):
            assert not as_sets[i] & as_sets[j]  # disjoint batches
            assert not {x for b in shards[i] for x in b} & {
                x for b in shards[j] for x in b
            }  # disjoint examples
    union = set().union(*as_sets)
    assert union == {tuple(b) for b in all_batches[:usable]}
    assert sum(len(sh) for sh in shards) == usable


def test_sampler_sharding_drops_the_remainder():
    lengths = [4] * 10  # max_tokens 8 -> 5 batches of 2
    s0 = TokenBatchSampler(lengths, 8, shuffle=False, num_replicas=2, rank=0)
    s1 = TokenBatchSampler(lengths, 8, shuffle=False, num_replicas=2, rank=1)
    assert len(s0.all_batches()) == 5
    assert list(s0) == [[0, 1], [4, 5]]
    assert list(s1) == [[2, 3], [6, 7]]
    assert len(s0) == len(s1) == 2


@pytest.mark.parametrize("max_tokens", [0, -5])
def test_sampler_rejects_small_budget(max_tokens):
    with pytest.raises(ValueError, match=f"max_tokens must be at least 1, got {max_tokens}"):
        TokenBatchSampler([3, 4], max_tokens)


@pytest.mark.parametrize("rank,num_replicas", [(-1, 2), (2, 2), (0, 0), (5, 3)])
def test_sampler_rejects_bad_rank(rank, num_replicas):
    with pytest.raises(ValueError, match=r"rank must be in range\(num_replicas="):
        TokenBatchSampler([3, 4, 5, 6], 4, num_replicas=num_replicas, rank=rank)


def test_sampler_rejects_empty_lengths():
    with pytest.raises(ValueError, match="lengths is empty"):
        TokenBatchSampler([], 10)


def test_sampler_rejects_more_processes_than_batches():
    with pytest.raises(ValueError, match="only 1 batches for 2 processes"):
        TokenBatchSampler([5, 5, 5], 100, num_replicas=2, rank=1)
    TokenBatchSampler([5, 5, 5], 10, num_replicas=2, rank=1)  # 2 batches: fine


# =========================================================================== 3. copy_task_batches


def test_copy_task_batches_shapes_and_values():
    vocab = 5
    batches = list(
        copy_task_batches(
            vocab, batch_size=64, n_batches=3, seq_len=10, rng=torch.Generator().manual_seed(0)
        )
    )
    assert len(batches) == 3
    for b in batches:
        assert isinstance(b, Batch)
        assert b.src.shape == (64, 10)
        assert b.tgt.shape == b.tgt_y.shape == (64, 9)
        assert b.tgt_mask.shape == (64, 9, 9) and b.src_mask.shape == (64, 1, 10)
        assert (b.src[:, 0] == 1).all()
        content = b.src[:, 1:]
        assert content.min() >= 2 and content.max() <= vocab - 1
        assert set(content.unique().tolist()) == set(range(2, vocab))  # every content id can occur
        # the target is the source: decoder input = src without its last token, labels = src without
        # the start
        torch.testing.assert_close(b.tgt, b.src[:, :-1])
        torch.testing.assert_close(b.tgt_y, b.src[:, 1:])
        assert b.src_mask.all()  # no padding (id 0)
        assert b.ntokens == 64 * 9
    assert not torch.equal(batches[0].src, batches[1].src)


def test_copy_task_batches_are_deterministic_with_an_rng():
    a = [b.src for b in copy_task_batches(V, 8, 4, seq_len=6, rng=torch.Generator().manual_seed(7))]
    b = [b.src for b in copy_task_batches(V, 8, 4, seq_len=6, rng=torch.Generator().manual_seed(7))]
    c = [b.src for b in copy_task_batches(V, 8, 4, seq_len=6, rng=torch.Generator().manual_seed(8))]
    for x, y in zip(a, b):
        assert torch.equal(x, y)  # exact: token ids
    assert any(not torch.equal(x, z) for x, z in zip(a, c))


def test_copy_task_batches_are_made_one_at_a_time_and_zero_batches_is_empty():
    "A generator: nothing is drawn when it is made, and each batch is drawn when it is asked for."
    assert list(copy_task_batches(V, 4, 0)) == []
    rng = torch.Generator().manual_seed(0)
    before = rng.get_state()
    # a million batches: a generator that made them all first would not be done for minutes
    batches = copy_task_batches(V, 4, 1_000_000, seq_len=3, rng=rng)
    assert torch.equal(rng.get_state(), before)  # exact: a random state; nothing drawn yet
    reference = copy_task_batches(V, 4, 3, seq_len=3, rng=torch.Generator().manual_seed(0))
    first, expected = next(batches), [b.src for b in reference]
    assert first.src.shape == (4, 3) and torch.equal(first.src, expected[0])  # exact: token ids
    torch.randint(0, 10, (7,), generator=rng)  # another user of the source draws meanwhile
    second = next(batches)  # drawn now, from where the source stands: not the second made earlier
    assert not torch.equal(second.src, expected[1])


# ======================================================================= 4. collate and make_loader
def test_collate_pads_right():
    pairs = [
        (torch.tensor([0, 5, 6, 1]), torch.tensor([0, 7, 1])),
        (torch.tensor([0, 5, 1]), torch.tensor([0, 7, 8, 9, 1])),
    ]
    batch = collate(pairs, pad=2)
    assert isinstance(batch, Batch)
    assert batch.src.tolist() == [[0, 5, 6, 1], [0, 5, 1, 2]]
    assert batch.tgt.tolist() == [[0, 7, 1, 2], [0, 7, 8, 9]]
    assert batch.tgt_y.tolist() == [[7, 1, 2, 2], [7, 8, 9, 1]]
    assert batch.ntokens == 6


@pytest.fixture(scope="module")
def corpus():
    "300 sampled pairs, tokenized with spaCy and encoded: (token pairs, src_vocab, tgt_vocab, ids)."
    de_tok, en_tok = load_tokenizers()
    pairs = sampled_pairs(300, seed=0)
    src_tokens = de_tok.tokenize([de for de, _ in pairs])
    tgt_tokens = en_tok.tokenize([en for _, en in pairs])
    src_vocab = Vocab.build(
        src_tokens, min_freq=1
    )  # every token known: batches decode back to the text
    tgt_vocab = Vocab.build(tgt_tokens, min_freq=1)
    encoded = encode_pairs(src_tokens, tgt_tokens, src_vocab, tgt_vocab)
    return list(zip(map(tuple, src_tokens), map(tuple, tgt_tokens))), src_vocab, tgt_vocab, encoded


def unpad(row: list[int], pad: int) -> list[int]:
    "A padded row of <s> ... </s> <blank>*: checks the layout and returns the ids without padding."
    n = len(row)
    while n and row[n - 1] == pad:
        n -= 1
    ids = row[:n]
    assert pad not in ids, f"padding inside a sentence: {row}"
    assert ids[0] == 0 and ids[-1] == 1 and 0 not in ids[1:] and 1 not in ids[:-1], row
    return ids


def check_batch(batch: Batch, pad: int, max_tokens: int) -> list[tuple[list[int], list[int]]]:
    """Check one batch's shapes, padding, masks and budget; return its (src ids, tgt ids) rows
    without padding."""
    assert isinstance(batch, Batch)
    B, S = batch.src.shape
    T = batch.tgt.size(1)
    assert batch.tgt.shape == batch.tgt_y.shape == (B, T)
    assert batch.src.dtype == batch.tgt.dtype == torch.long
    assert B == 1 or B * max(S, T + 1) <= max_tokens, f"{B} x {max(S, T + 1)} > {max_tokens}"
    # The full target is tgt plus the last label; tgt_y is tgt shifted by one.
    full_tgt = torch.cat([batch.tgt, batch.tgt_y[:, -1:]], dim=1)
    assert torch.equal(batch.tgt[:, 1:], batch.tgt_y[:, :-1])  # exact: token ids
    # Masks
    assert batch.src_mask.shape == (B, 1, S)
    assert torch.equal(batch.src_mask, (batch.src != pad).unsqueeze(-2))  # exact: booleans
    assert batch.tgt_mask.shape == (B, T, T)
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    assert torch.equal(batch.tgt_mask, (batch.tgt != pad).unsqueeze(-2) & causal)  # exact: bools
    assert batch.ntokens == int((batch.tgt_y != pad).sum())
    rows = []
    for src_row, tgt_row in zip(batch.src.tolist(), full_tgt.tolist()):
        rows.append((unpad(src_row, pad), unpad(tgt_row, pad)))
    # No column is padding throughout: padded to the longest row.
    assert max(len(s) for s, _ in rows) == S
    assert max(len(t) for _, t in rows) == T + 1
    assert int(batch.src_mask.sum()) == sum(len(s) for s, _ in rows)
    return rows


def epoch_pairs(
    loader, src_vocab, tgt_vocab, pad, max_tokens
) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    out = []
    for batch in loader:
        for src_ids, tgt_ids in check_batch(batch, pad, max_tokens):
            out.append((tuple(src_vocab.decode(src_ids)), tuple(tgt_vocab.decode(tgt_ids))))
    return out


@pytest.mark.parametrize("max_tokens", [60, 200, 1000])
def test_loader_covers_every_pair_once(corpus, max_tokens):
    token_pairs, src_vocab, tgt_vocab, encoded = corpus
    assert len(token_pairs) == 300 and src_vocab.pad == tgt_vocab.pad == 2
    loader = make_loader(encoded, pad=src_vocab.pad, max_tokens=max_tokens, seed=1)
    for epoch in range(2):
        loader.batch_sampler.set_epoch(epoch)
        seen = epoch_pairs(loader, src_vocab, tgt_vocab, src_vocab.pad, max_tokens)
        assert Counter(seen) == Counter(token_pairs)
        assert len(seen) == len(token_pairs)
    assert len(loader) == len(list(loader)) > 1


def test_loader_batches_are_length_bucketed(corpus):
    token_pairs, src_vocab, _, encoded = corpus
    loader = make_loader(encoded, pad=src_vocab.pad, max_tokens=150, shuffle=False)
    lengths = [max(b.src.size(1), b.tgt.size(1) + 1) for b in loader]
    assert lengths == sorted(lengths)  # without shuffling: shortest first
    # Padding is modest: buckets of similar length (the longest side of each pair is within the
    # batch's width).
    total_real = sum(max(len(src), len(tgt)) for src, tgt in encoded)
    total_padded = sum(b.src.size(0) * max(b.src.size(1), b.tgt.size(1) + 1) for b in loader)
    assert total_padded < 1.5 * total_real


def test_loader_set_epoch_changes_order_deterministically(corpus):
    _, src_vocab, _, encoded = corpus
    pad = src_vocab.pad

    def order(loader):
        return [tuple(map(tuple, b.src.tolist())) for b in loader]

    loader = make_loader(encoded, pad=pad, max_tokens=200, seed=3)
    epoch0 = order(loader)
    assert order(loader) == epoch0  # same epoch, same order
    assert (
        order(make_loader(encoded, pad=pad, max_tokens=200, seed=3)) == epoch0
    )  # a fresh loader, same seed
    loader.batch_sampler.set_epoch(1)
    epoch1 = order(loader)
    assert epoch1 != epoch0

    def sentences(batches):
        return Counter(tuple(unpad(list(r), pad)) for b in batches for r in b)

    assert sentences(epoch1) == sentences(epoch0)
    loader.batch_sampler.set_epoch(0)
    assert order(loader) == epoch0
    assert order(make_loader(encoded, pad=pad, max_tokens=200, seed=4)) != epoch0


def test_loader_replicas_are_disjoint(corpus):
    token_pairs, src_vocab, tgt_vocab, encoded = corpus
    pad, max_tokens = src_vocab.pad, 120
    index = {pair: i for i, pair in enumerate(token_pairs)}
    assert len(index) == len(token_pairs)  # synthetic pairs are distinct
    shards = []
    for rank in range(2):
        loader = make_loader(
            encoded, pad=pad, max_tokens=max_tokens, seed=5, num_replicas=2, rank=rank
        )
        loader.batch_sampler.set_epoch(2)
        shards.append(
            [index[p] for p in epoch_pairs(loader, src_vocab, tgt_vocab, pad, max_tokens)]
        )
    a, b = shards
    assert len(a) == len(set(a)) and len(b) == len(set(b))
    assert set(a).isdisjoint(b)
    assert len(
        list(make_loader(encoded, pad=pad, max_tokens=max_tokens, num_replicas=2, rank=0))
    ) == len(list(make_loader(encoded, pad=pad, max_tokens=max_tokens, num_replicas=2, rank=1)))
    # Together they cover everything except at most the one batch dropped to give both processes as
    # many batches.
    full = make_loader(encoded, pad=pad, max_tokens=max_tokens, seed=5)
    full.batch_sampler.set_epoch(2)
    batches = [len(b.src) for b in full]
    missing = len(token_pairs) - len(a) - len(b)
    assert missing == 0 or (len(batches) % 2 == 1 and missing in batches)


def test_loader_without_shuffle_is_the_same_every_epoch(corpus):
    _, src_vocab, _, encoded = corpus
    loader = make_loader(encoded, pad=src_vocab.pad, max_tokens=200, shuffle=False)
    first = [b.src.tolist() for b in loader]
    loader.batch_sampler.set_epoch(7)
    assert [b.src.tolist() for b in loader] == first


def test_make_loader_takes_any_sequence_of_id_pairs() -> None:
    "A plain list of (source ids, target ids) batches like encoded pairs: the longer side counts."
    pairs = [(torch.tensor([0, 4, 5, 1]), torch.tensor([0, 6, 1])) for _ in range(3)]
    pairs.append((torch.tensor([0, 4, 1]), torch.tensor([0, 6, 7, 8, 9, 10, 1])))
    batches = list(make_loader(pairs, pad=2, max_tokens=12, shuffle=False))
    assert [b.src.size(0) for b in batches] == [3, 1]  # 3 x 4 tokens, then the 7 of the last
    assert batches[1].tgt_y.tolist() == [[6, 7, 8, 9, 10, 1]]
    with pytest.raises(ValueError, match="lengths is empty"):
        make_loader([], pad=2, max_tokens=12)
