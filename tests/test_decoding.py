"""Tests for annotated_transformer.decoding: the key/value cache, greedy and beam search.

1. The cached decoder computes what `model.decode` computes, post-norm and pre-norm.
2. Greedy search: cached = uncached, batch = one at a time, = greedy_decode, per-sentence limits.
3. Beam search: beam 1 = greedy, cached = uncached, batch = alone, exhaustive search on a tiny
   model, the length penalty, hypotheses sorted.
4. Models that are not Transformers (`begin_decoding`): both searches drive their decoder; beam
   search stops as soon as beam_size hypotheses have finished, counted in decoder steps.
5. Bad input, a bad length penalty alpha included.
6. A beam wider than the vocabulary (or than what banning leaves of it): the search stays exact.
7. `greedy_decode`, the version to read: batch = one sentence at a time, end symbols, early stop,
   errors.
8. Part I and the engine agree: `greedy_decode` and `greedy_search` find the same tokens,
   `beam_decode` and `beam_search` the same hypotheses with the same scores, on models whose
   outputs are not trivial (a copy-trained one, random ones of different lengths).

Checkpoint averaging, which used to live in decoding, is tested in tests/test_checkpoint.py.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from annotated_transformer.batching import copy_task_batches
from annotated_transformer.decoding import Hypothesis, beam_decode, greedy_decode, length_penalty
from annotated_transformer.fast_decoding import (
    CachedDecoder,
    PrefixDecoder,
    StepDecoder,
    beam_search,
    greedy_search,
)
from annotated_transformer.losses import LabelSmoothing, sequence_loss
from annotated_transformer.model import ModelConfig, subsequent_mask
from annotated_transformer.training import Updates, noam_optimizer, run_epoch

START, END, PAD = 1, 2, 0


def random_model(norm_first: bool = False, vocab: int = 13, end_bias: float = -1.0, seed: int = 0):
    """A small random model in eval mode; its end-symbol bias is set so that outputs end at
    different steps."""
    torch.manual_seed(seed)
    model = (
        ModelConfig(N=2, d_model=32, d_ff=64, h=4, dropout=0.1, norm_first=norm_first)
        .build(vocab, vocab)
        .eval()
    )
    with torch.no_grad():
        model.generator.proj.bias[END] += end_bias
    return model


def random_batch(B: int = 5, S: int = 9, vocab: int = 13, seed: int = 1):
    "Source ids (B, S) with rows of different lengths, and their mask."
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, vocab, (B, S), generator=g)
    for i in range(B):
        src[i, S - i :] = PAD  # row i has i padding positions
    src[:, 0] = START
    return src, (src != PAD).unsqueeze(-2)


# =========================================================================== 1. the cache
@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_and_prefix_decoders_match_model_decode(norm_first: bool) -> None:
    model = random_model(norm_first)
    src, src_mask = random_batch()
    ys = torch.randint(3, 13, (src.size(0), 8))
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        full = model.generator(model.decode(memory, src_mask, ys, subsequent_mask(8)))  # (B, 8, V)
        cached, prefix = (
            CachedDecoder(model, memory, src_mask),
            PrefixDecoder(model, memory, src_mask),
        )
        for t in range(8):
            torch.testing.assert_close(cached.step(ys[:, t]), full[:, t], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(prefix.step(ys[:, t]), full[:, t], atol=1e-5, rtol=1e-5)
    cache = cached.cache.layers[0]  # (B, h, room, d_k): one cached position per step
    assert cache.t == 8 and cache.keys[:, :, : cache.t].shape == (src.size(0), 4, 8, 8)


def test_the_cache_follows_table3s_narrow_keys_and_learned_positions() -> None:
    """Keys of d_k = 3 features and values of d_model / h = 8 are cached apart; learned positions
    are looked up step by step."""
    torch.manual_seed(0)
    model = (
        ModelConfig(N=2, d_model=32, d_ff=64, h=4, d_k=3, positions="learned").build(13, 13).eval()
    )
    src, src_mask = random_batch()
    ys = torch.randint(3, 13, (src.size(0), 6))
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        full = model.generator(model.decode(memory, src_mask, ys, subsequent_mask(6)))  # (B, 6, V)
        cached = CachedDecoder(model, memory, src_mask)
        for t in range(6):
            torch.testing.assert_close(cached.step(ys[:, t]), full[:, t], atol=1e-5, rtol=1e-5)
    cache = cached.cache.layers[0]
    assert (cache.keys[:, :, : cache.t].shape, cache.values[:, :, : cache.t].shape) == (
        (src.size(0), 4, 6, 3),
        (src.size(0), 4, 6, 8),
    )


def test_select_reorders_every_cached_row() -> None:
    model = random_model()
    src, src_mask = random_batch()
    ys = torch.randint(3, 13, (src.size(0), 4))
    rows = torch.tensor([3, 0, 0])
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        whole, part = (
            CachedDecoder(model, memory, src_mask),
            CachedDecoder(model, memory[rows], src_mask[rows]),
        )
        for t in range(3):
            expected = whole.step(ys[:, t])[rows]
            torch.testing.assert_close(part.step(ys[rows, t]), expected, atol=1e-5, rtol=1e-5)
        whole.select(rows)  # now the rows follow `rows`, caches included
        torch.testing.assert_close(
            whole.step(ys[rows, 3]), part.step(ys[rows, 3]), atol=1e-5, rtol=1e-5
        )


@pytest.mark.parametrize("K", [1, 3])
def test_beams_share_their_sentences_source_and_follow_any_reordering(K: int) -> None:
    """With beams=K the K rows of a sentence attend to one copy of its source: the same numbers as
    recomputing the prefix of each row from each sentence given K times, through swaps, repeats and
    sentences leaving."""
    model = random_model()
    src, src_mask = random_batch()
    B = src.size(0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        beams = CachedDecoder(model, memory, src_mask, beams=K)
        repeated = PrefixDecoder(
            model, memory.repeat_interleave(K, 0), src_mask.repeat_interleave(K, 0)
        )
        for t, alive in enumerate([B, B, B - 1, B - 1, 1]):
            y = torch.randint(3, 13, (alive * K,), generator=g)
            torch.testing.assert_close(beams.step(y), repeated.step(y), atol=1e-5, rtol=1e-5)
            # the next sentences: all in reverse order after step 0, all but the first after
            # step 1, one after step 3; beams drawn with repeats from their own sentence's rows
            keep = {0: range(B - 1, -1, -1), 1: range(1, B), 3: [1]}.get(t, range(alive))
            rows = torch.cat([j * K + torch.randint(0, K, (K,), generator=g) for j in keep])
            beams.select(rows), repeated.select(rows)
    assert beams.cache.sources[0][0].size(0) == 1 and beams.cache.layers[0].keys.size(0) == K


def test_cached_decoder_refuses_positions_past_the_table() -> None:
    src, src_mask = random_batch()
    short = ModelConfig(N=1, d_model=16, d_ff=32, h=2, max_len=3).build(13, 13).eval()
    decoder = CachedDecoder(short, short.encode(src[:, :3], src_mask[..., :3]), src_mask[..., :3])
    y = torch.full((src.size(0),), START)
    with torch.no_grad():
        for _ in range(3):
            decoder.step(y)
        with pytest.raises(ValueError, match="beyond the positional-encoding table"):
            decoder.step(y)


# =========================================================================== 2. greedy search
@pytest.mark.parametrize("norm_first", [False, True])
def test_greedy_cached_equals_uncached(norm_first: bool) -> None:
    model = random_model(norm_first)
    src, src_mask = random_batch()
    fast = greedy_search(model, src, src_mask, 15, START, END)
    slow = greedy_search(model, src, src_mask, 15, START, END, cached=False)
    assert [t for t, _ in fast] == [t for t, _ in slow]
    for (_, a), (_, b) in zip(fast, slow):
        assert a == pytest.approx(b, abs=1e-5)
    lengths = {len(t) for t, _ in fast}
    assert len(lengths) > 1, "the test needs rows that stop at different steps"
    assert any(t[-1] == END for t, _ in fast)


def up_to_end(row: list[int], end: int = END) -> list[int]:
    "A row of `greedy_decode` (start symbol dropped) read up to its first end symbol."
    return row[: row.index(end) + 1] if end in row else row


def test_greedy_search_scores_are_log_probabilities() -> None:
    model = random_model()
    src, src_mask = random_batch()
    found = greedy_search(model, src, src_mask, 12, START, END)
    reference = greedy_decode(model, src, src_mask, 12, START, END, pad=PAD)
    for i, ((tokens, score), row) in enumerate(zip(found, reference[:, 1:].tolist())):
        assert tokens == up_to_end(row)
        # the score is the model's log-probability of the tokens
        ys = torch.tensor([[START, *tokens]])
        with torch.no_grad():
            logp = model.generator(
                model.decode(
                    model.encode(src[i : i + 1], src_mask[i : i + 1]),
                    src_mask[i : i + 1],
                    ys[:, :-1],
                    subsequent_mask(len(tokens)),
                )
            )
        assert score == pytest.approx(
            logp[0, torch.arange(len(tokens)), ys[0, 1:]].sum().item(), abs=1e-4
        )


def test_greedy_batch_equals_one_at_a_time_with_per_sentence_limits() -> None:
    model = random_model()
    src, src_mask = random_batch()
    limits = [14, 3, 9, 1, 6]
    together = greedy_search(model, src, src_mask, limits, START, END)
    for i, limit in enumerate(limits):
        [alone] = greedy_search(model, src[i : i + 1], src_mask[i : i + 1], limit, START, END)
        assert together[i][0] == alone[0]
        assert together[i][1] == pytest.approx(alone[1], abs=1e-5)
        assert len(alone[0]) <= limit - 1
    assert together[3] == ([], 0.0)  # exact: max_len 1: only the start symbol, no score added


def test_greedy_decodes_an_all_padding_source_row() -> None:
    "Documented: an empty source row is decoded from the start symbol alone, with finite scores."
    model = random_model()
    src, src_mask = random_batch()
    src[2, :], src_mask[2] = PAD, False
    found = greedy_search(model, src, src_mask, 8, START, END)
    assert all(math.isfinite(score) for _, score in found)
    assert found[2][0]


# =========================================================================== 3. beam search
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_of_one_is_greedy(alpha: float) -> None:
    model = random_model()
    src, src_mask = random_batch()
    greedy = greedy_search(model, src, src_mask, 12, START, END)
    beam = beam_search(model, src, src_mask, 12, START, END, beam_size=1, alpha=alpha)
    for (tokens, score), [(beam_tokens, beam_score)] in zip(greedy, beam):
        assert beam_tokens == tokens
        assert beam_score == pytest.approx(score / length_penalty(len(tokens), alpha), abs=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_beam_cached_equals_uncached_and_batch_equals_alone(norm_first: bool) -> None:
    model = random_model(norm_first)
    src, src_mask = random_batch()
    limits = [14, 4, 9, 12, 7]
    batched = beam_search(model, src, src_mask, limits, START, END, beam_size=4)
    uncached = beam_search(model, src, src_mask, limits, START, END, beam_size=4, cached=False)
    for i, limit in enumerate(limits):
        [alone] = beam_search(
            model, src[i : i + 1], src_mask[i : i + 1], limit, START, END, beam_size=4
        )
        assert [t for t, _ in batched[i]] == [t for t, _ in uncached[i]] == [t for t, _ in alone]
        for (_, a), (_, b), (_, c) in zip(batched[i], uncached[i], alone):
            assert a == pytest.approx(b, abs=1e-5) and a == pytest.approx(c, abs=1e-5)
        scores = [s for _, s in batched[i]]
        assert scores == sorted(scores, reverse=True) and 1 <= len(scores) <= 4
        assert all(len(t) <= limit - 1 for t, _ in batched[i])


def test_beam_scores_are_normalized_log_probabilities() -> None:
    model = random_model()
    src, src_mask = random_batch(B=2)
    for i, hypotheses in enumerate(
        beam_search(model, src, src_mask, 10, START, END, beam_size=3, alpha=0.6)
    ):
        memory = model.encode(src[i : i + 1], src_mask[i : i + 1])
        for tokens, score in hypotheses:
            ys = torch.tensor([[START, *tokens]])
            with torch.no_grad():
                logp = model.generator(
                    model.decode(
                        memory, src_mask[i : i + 1], ys[:, :-1], subsequent_mask(len(tokens))
                    )
                )
            total = logp[0, torch.arange(len(tokens)), ys[0, 1:]].sum().item()
            assert score == pytest.approx(total / length_penalty(len(tokens), 0.6), abs=1e-4)


def tiny_model(seed: int = 27):
    "Vocabulary 4: 0 start, 1 end, 2 and 3 words; the end symbol made less likely."
    torch.manual_seed(seed)
    model = ModelConfig(N=1, d_model=16, d_ff=32, h=2, dropout=0.0).build(4, 4).eval()
    with torch.no_grad():
        model.generator.proj.bias[1] -= 1.0
    return model


def every_output(max_new: int):
    "Every output of at most max_new tokens: ended by the end symbol 1, or cut at the limit."
    for n in range(1, max_new + 1):
        for words in itertools.product([0, 2, 3], repeat=n - 1):
            yield [*words, 1]
            if n == max_new:
                yield from ([*words, w] for w in (0, 2, 3))


@pytest.mark.parametrize("seed", [23, 27, 29, 34])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_wide_beam_finds_the_best_sequence_by_enumeration(seed: int, alpha: float) -> None:
    model = tiny_model(seed)
    src, mask = torch.tensor([[1, 2, 3, 2]]), torch.ones(1, 1, 4, dtype=torch.bool)
    memory = model.encode(src, mask)

    def score(tokens):
        ys = torch.tensor([[0, *tokens]])
        with torch.no_grad():
            logp = model.generator(
                model.decode(memory, mask, ys[:, :-1], subsequent_mask(len(tokens)))
            )
        return logp[0, torch.arange(len(tokens)), ys[0, 1:]].sum().item() / length_penalty(
            len(tokens), alpha
        )

    scored = sorted(((score(t), t) for t in every_output(4)), reverse=True)
    assert len(scored) == 121
    found = beam_search(model, src, mask, 5, 0, 1, beam_size=256, alpha=alpha)[0]
    assert found[0][0] == scored[0][1]  # exact: tokens
    assert found[0][1] == pytest.approx(scored[0][0], abs=1e-5)
    # the whole space was searched: the second and third best agree too
    assert [t for t, _ in found[:3]] == [t for _, t in scored[:3]]


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_banned_tokens_are_never_generated_and_the_best_remaining_sequence_is_found(
    alpha: float,
) -> None:
    model = tiny_model(27)
    src, mask = torch.tensor([[1, 2, 3, 2]]), torch.ones(1, 1, 4, dtype=torch.bool)
    memory = model.encode(src, mask)

    def score(tokens):  # the unnormalized log-probabilities the search adds up
        ys = torch.tensor([[0, *tokens]])
        with torch.no_grad():
            logp = model.generator(
                model.decode(memory, mask, ys[:, :-1], subsequent_mask(len(tokens)))
            )
        return logp[0, torch.arange(len(tokens)), ys[0, 1:]].sum().item() / length_penalty(
            len(tokens), alpha
        )

    unbanned = beam_search(model, src, mask, 5, 0, 1, beam_size=256, alpha=alpha)[0]
    assert any(3 in t for t, _ in unbanned[:3]), "token 3 should matter in this example"
    best_without_3 = max((score(t), t) for t in every_output(4) if 3 not in t)
    found = beam_search(model, src, mask, 5, 0, 1, beam_size=256, alpha=alpha, banned=[3])[0]
    assert all(3 not in t for t, _ in found)
    assert found[0][0] == best_without_3[1]
    assert found[0][1] == pytest.approx(best_without_3[0], abs=1e-5)
    [(greedy_tokens, _)] = greedy_search(model, src, mask, 5, 0, 1, banned=[3, 2])
    assert set(greedy_tokens) <= {0, 1}


def test_greedy_can_miss_what_beam_search_finds() -> None:
    model = tiny_model(27)
    src, mask = torch.tensor([[1, 2, 3, 2]]), torch.ones(1, 1, 4, dtype=torch.bool)
    [(greedy_tokens, greedy_logp)] = greedy_search(model, src, mask, 5, 0, 1)
    [(beam_tokens, beam_logp), *_] = beam_search(model, src, mask, 5, 0, 1, beam_size=4, alpha=0.0)[
        0
    ]
    assert beam_tokens != greedy_tokens and beam_logp > greedy_logp


def test_length_penalty() -> None:
    """Part 3 checks alpha = 0, alpha = 1 and one token; here a fractional alpha and lengths in a
    tensor."""
    assert length_penalty(19, 0.5) == pytest.approx(2.0)
    torch.testing.assert_close(
        length_penalty(torch.tensor([1.0, 7.0, 19.0]), 1.0), torch.tensor([1.0, 2.0, 4.0])
    )


# =========================================================================== 4. other models
class ScriptedDecoder:
    """Whatever it is fed, prefers `script[t]` at step t, more confidently at each step; the end
    symbol is unlikely elsewhere."""

    def __init__(self, script: list[int], rows: int, vocab: int):
        self.script, self.rows, self.vocab = script, rows, vocab
        self.fed: list[
            list[int]
        ] = []  # the tokens of every step, row by row: len(fed) is the number of steps

    def step(self, y: Tensor) -> Tensor:
        assert y.shape == (self.rows,)
        t = len(self.fed)
        self.fed.append(y.tolist())
        logits = -0.5 * torch.arange(self.vocab, dtype=torch.float)  # distinct: no ties
        logits[END] = -20.0
        if t < len(self.script):
            logits[self.script[t]] = 2.0 + t
        return logits.log_softmax(-1).expand(self.rows, -1).clone()  # (B, V)

    def select(self, rows: Tensor) -> None:
        self.rows = len(rows)


class ScriptedModel:
    """Not a Transformer: a model that starts decoding itself (as Part 8's recurrent models do),
    keeping its decoders."""

    def __init__(self, script: list[int], vocab: int = 8):
        self.script, self.vocab, self.decoders = script, vocab, []

    def begin_decoding(self, src: Tensor, src_mask: Tensor) -> ScriptedDecoder:
        self.decoders.append(ScriptedDecoder(self.script, src.size(0), self.vocab))
        return self.decoders[-1]

    def logp(self, tokens: list[int]) -> float:
        "The log-probability its decoder gives `tokens` (fed in any way)."
        decoder = ScriptedDecoder(self.script, 1, self.vocab)
        return sum(decoder.step(torch.tensor([START]))[0, token].item() for token in tokens)


def test_greedy_search_drives_a_model_that_begins_decoding_itself() -> None:
    model = ScriptedModel([5, 6, END])
    src, src_mask = random_batch(B=3)
    found = greedy_search(model, src, src_mask, [10, 3, 2], START, END)
    assert all(isinstance(h, Hypothesis) for h in found)
    assert [h.tokens for h in found] == [
        [5, 6, END],
        [5, 6],
        [5],
    ]  # the script, cut at each sentence's limit
    for h in found:
        assert h.score == pytest.approx(model.logp(h.tokens), abs=1e-6)
    [decoder] = model.decoders
    assert isinstance(decoder, StepDecoder)
    # fed the start symbol, then each step's choice; a sentence's row leaves once it is done
    assert decoder.fed == [[START] * 3, [5, 5], [6]]


def test_beam_search_drives_a_model_that_begins_decoding_itself() -> None:
    model = ScriptedModel([5, 6, END])
    src, src_mask = random_batch(B=2)
    found = beam_search(model, src, src_mask, [20, 3], START, END, beam_size=2, alpha=0.6)
    assert found[0][0] == (
        [5, 6, END],
        pytest.approx(model.logp([5, 6, END]) / length_penalty(3, 0.6), abs=1e-6),
    )
    assert found[1][0].tokens == [5, 6]  # cut at its limit
    assert all(isinstance(h, Hypothesis) for hyps in found for h in hyps)
    [decoder] = model.decoders
    assert decoder.fed[0] == [START] * 4  # two sentences with two beams each


def test_beam_stops_once_beam_size_hypotheses_are_finished() -> None:
    "At step 3 both beams of both sentences end: the search must stop there, not run on to max_len."
    model = ScriptedModel([5, 6, END])
    src, src_mask = random_batch(B=2)
    found = beam_search(model, src, src_mask, 20, START, END, beam_size=2)
    assert [[h.tokens[-1] for h in hyps] for hyps in found] == [
        [END, END],
        [END, END],
    ]  # beam_size finished each
    [decoder] = model.decoders
    assert len(decoder.fed) == 3, (
        f"{len(decoder.fed)} decoder steps: the search went on after beam_size hypotheses finished"
    )


# =========================================================================== 5. bad input
def test_bad_arguments_give_clear_errors() -> None:
    model = random_model()
    src, src_mask = random_batch()
    with pytest.raises(ValueError, match="beam_size must be at least 1"):
        beam_search(model, src, src_mask, 10, START, END, beam_size=0)
    for search in (greedy_search, beam_search):
        with pytest.raises(ValueError, match="max_len must be at least 1"):
            search(model, src, src_mask, 0, START, END)
        with pytest.raises(ValueError, match="non-empty"):
            search(model, src[:, :0], src_mask[..., :0], 5, START, END)
        with pytest.raises(ValueError, match="src_mask must have shape"):
            search(model, src, src_mask[:, :, :3], 5, START, END)
        with pytest.raises(ValueError, match="gives 2 limits for 5 sentences"):
            search(model, src, src_mask, [5, 6], START, END)


@pytest.mark.parametrize("alpha", [math.nan, math.inf, -math.inf, -5.0, -0.1])
def test_a_non_finite_or_negative_alpha_is_refused_before_decoding(alpha: float) -> None:
    with pytest.raises(ValueError, match=f"alpha must be a finite number at least 0, got {alpha}"):
        length_penalty(3, alpha)
    model = ScriptedModel([5, 6, END])
    src, src_mask = random_batch(B=2)
    with pytest.raises(ValueError, match=f"alpha must be a finite number at least 0, got {alpha}"):
        beam_search(model, src, src_mask, 10, START, END, beam_size=2, alpha=alpha)
    assert model.decoders == [], "the search began decoding before it checked alpha"


def test_an_alpha_whose_length_penalty_overflows_is_refused_before_decoding() -> None:
    model = ScriptedModel([5, 6, END])
    src, src_mask = random_batch(B=2)
    assert beam_search(model, src, src_mask, 10, START, END, beam_size=2, alpha=300.0)[
        0
    ]  # lp(9) = (14 / 6) ** 300: a float
    with pytest.raises(
        ValueError, match="alpha=300.0 is too large: the length penalty of 199 tokens overflows"
    ):
        beam_search(
            model, src, src_mask, [10, 200], START, END, beam_size=2, alpha=300.0
        )  # lp(199) = 34 ** 300 is not
    assert len(model.decoders) == 1, "the second search began decoding before it checked alpha"


# ============================================================== 6. a beam wider than the vocabulary
@pytest.mark.parametrize("K", [5, 7, 12])
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_a_beam_wider_than_the_vocabulary_matches_part_one(K: int, alpha: float) -> None:
    """V = 4 < K: at the first steps there are fewer real candidates than beams; the rest stay at
    -inf and never surface."""
    model = tiny_model(27)
    src, mask = torch.tensor([[1, 2, 3, 2]]), torch.ones(1, 1, 4, dtype=torch.bool)
    for max_len in (2, 3, 6):
        found = beam_search(model, src, mask, max_len, 0, 1, beam_size=K, alpha=alpha)[0]
        expected = beam_decode(model, src, mask, max_len, 0, 1, beam_size=K, alpha=alpha)
        assert [t for t, _ in found] == [t for t, _ in expected]
        assert all(math.isfinite(score) for _, score in found)
        for (_, a), (_, b) in zip(found, expected):
            assert a == pytest.approx(b, abs=1e-5)


def test_a_beam_wider_than_what_is_left_after_banning_returns_every_output() -> None:
    """Tokens 2 and 3 banned leave 0 and the end symbol 1: five outputs of at most 4 tokens, all of
    them found, best first."""
    model = tiny_model(27)
    src, mask = torch.tensor([[1, 2, 3, 2]]), torch.ones(1, 1, 4, dtype=torch.bool)
    found = beam_search(model, src, mask, 5, 0, 1, beam_size=8, alpha=0.6, banned=[2, 3])[0]
    assert sorted(t for t, _ in found) == [[0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1], [0, 1], [1]]
    scores = [s for _, s in found]
    assert scores == sorted(scores, reverse=True) and all(math.isfinite(s) for s in scores)


# =========================================================================== 7. greedy_decode
V = 11  # the copy task's vocabulary: 0 padding, 1 start, 2..10 content
TINY = ModelConfig(N=1, d_model=16, d_ff=32, h=2, dropout=0.0)


def copy_task_model(seed: int = 0):
    torch.manual_seed(seed)
    return TINY.build(V, V)


@pytest.fixture(scope="module")
def copy_model():
    "A tiny model trained briefly on the copy task (a couple of seconds on a CPU)."
    torch.manual_seed(0)
    model = TINY.build(V, V)
    opt, sched = noam_optimizer(model, 16, factor=1.0, warmup=50)
    batches = copy_task_batches(V, 32, 150, seq_len=8, rng=torch.Generator().manual_seed(0))
    loss = sequence_loss(LabelSmoothing(V, PAD, 0.0), model.generator)
    run_epoch(batches, model, loss, Updates(opt, sched))
    model.eval()
    return model


def padded_sources():
    rows = [[1, 5, 3, 9, 2, 7, 4], [1, 8, 6, 2], [1, 4, 4, 10, 3]]
    src = torch.zeros(len(rows), max(map(len, rows)), dtype=torch.long)
    for i, r in enumerate(rows):
        src[i, : len(r)] = torch.tensor(r)
    return rows, src


@pytest.mark.parametrize("trained", [False, True], ids=["random", "copy-trained"])
def test_greedy_decode_batch_equals_one_at_a_time(trained, request):
    model = request.getfixturevalue("copy_model") if trained else copy_task_model(3).eval()
    rows, src = padded_sources()
    max_len = 9
    ys = greedy_decode(model, src, (src != PAD).unsqueeze(-2), max_len, start_symbol=1)
    assert ys.shape == (3, max_len) and ys.dtype == src.dtype
    assert (ys[:, 0] == 1).all()
    for i, r in enumerate(rows):
        one = torch.tensor([r])
        alone = greedy_decode(model, one, (one != PAD).unsqueeze(-2), max_len, start_symbol=1)
        torch.testing.assert_close(ys[i : i + 1], alone)
    if trained:  # the copy model has learned something: it copies more than chance (1 in 9) would
        hits = sum(int(ys[i, j] == r[j]) for i, r in enumerate(rows) for j in range(1, len(r)))
        assert hits >= 0.5 * sum(len(r) - 1 for r in rows)


def test_greedy_decode_with_end_symbol_matches_one_at_a_time(copy_model):
    rows, src = padded_sources()
    max_len = 9
    free = greedy_decode(copy_model, src, (src != PAD).unsqueeze(-2), max_len, start_symbol=1)
    end = free[1, 2].item()  # a token row 1 produces early
    ys = greedy_decode(
        copy_model,
        src,
        (src != PAD).unsqueeze(-2),
        max_len,
        start_symbol=1,
        end_symbol=end,
        pad=PAD,
    )
    assert ys.size(0) == 3 and ys.size(1) <= max_len
    for i, r in enumerate(rows):
        one = torch.tensor([r])
        alone = greedy_decode(
            copy_model,
            one,
            (one != PAD).unsqueeze(-2),
            max_len,
            start_symbol=1,
            end_symbol=end,
            pad=PAD,
        )
        n = alone.size(1)
        torch.testing.assert_close(ys[i, :n], alone[0])
        # the batch stops only once every row has ended: before that, each row is the free decode
        assert ys[i].tolist() == free[i, : ys.size(1)].tolist()
        hits = (ys[i] == end).nonzero().flatten().tolist()
        if hits:  # a lone row stops at its end symbol
            assert alone.size(1) == hits[0] + 1
    assert (ys[1] == end).any()


class Scripted(nn.Module):
    """A stand-in model: row b emits script[b, t - 1] at step t (t tokens decoded so far). Counts
    decoder calls."""

    def __init__(self, vocab: int = 8):
        super().__init__()
        self.vocab, self.decode_calls = vocab, 0

    def encode(self, src, src_mask):
        return src.float().unsqueeze(-1)  # (B, S, 1): the script

    def decode(self, memory, src_mask, tgt, tgt_mask):
        self.decode_calls += 1
        assert tgt_mask.shape[-2:] == (tgt.size(1), tgt.size(1))
        t = tgt.size(1)
        return memory[:, t - 1 : t].expand(-1, t, -1)  # (B, t, 1), last position = next token

    def generator(self, out):
        return F.one_hot(out.squeeze(-1).long(), self.vocab).float().log()


def scripted_src():
    # end symbol 4: row 0 ends at step 2, row 1 at step 3, row 2 at step 1
    return torch.tensor(
        [[5, 4, 3, 3, 3, 3, 3, 3, 3], [3, 6, 4, 3, 4, 3, 3, 3, 3], [4, 6, 6, 6, 6, 6, 6, 6, 6]]
    )


def test_greedy_decode_stops_rows_at_end_symbol_and_ends_early():
    src = scripted_src()
    m = Scripted()
    ys = greedy_decode(
        m,
        src,
        torch.ones(3, 1, 9, dtype=torch.bool),
        max_len=10,
        start_symbol=1,
        end_symbol=4,
        pad=0,
    )
    # rows that ended go on until every row has: each is read up to its end symbol
    torch.testing.assert_close(ys, torch.tensor([[1, 5, 4, 3], [1, 3, 6, 4], [1, 4, 6, 6]]))
    assert m.decode_calls == 3  # stopped once every row had ended, not after max_len - 1 steps


def test_greedy_decode_runs_to_max_len_without_end_symbol():
    m = Scripted()
    ys = greedy_decode(
        m, scripted_src(), torch.ones(3, 1, 9, dtype=torch.bool), max_len=6, start_symbol=1, pad=0
    )
    torch.testing.assert_close(
        ys, torch.cat([torch.ones(3, 1, dtype=torch.long), scripted_src()[:, :5]], dim=1)
    )
    assert m.decode_calls == 5


def test_greedy_decode_row_that_never_ends_reaches_max_len():
    src = scripted_src()
    src[1] = 3  # row 1 never emits the end symbol
    ys = greedy_decode(
        Scripted(),
        src,
        torch.ones(3, 1, 9, dtype=torch.bool),
        max_len=7,
        start_symbol=1,
        end_symbol=4,
        pad=0,
    )
    assert ys.shape == (3, 7)
    torch.testing.assert_close(ys[1], torch.tensor([1, 3, 3, 3, 3, 3, 3]))
    torch.testing.assert_close(ys[0], torch.tensor([1, 5, 4, 3, 3, 3, 3]))
    torch.testing.assert_close(ys[2], torch.tensor([1, 4, 6, 6, 6, 6, 6]))


def test_greedy_decode_max_len_one_is_the_start_symbol():
    m = Scripted()
    ys = greedy_decode(m, scripted_src(), None, max_len=1, start_symbol=2, end_symbol=4, pad=0)
    torch.testing.assert_close(ys, torch.full((3, 1), 2))
    assert m.decode_calls == 0


def test_greedy_decode_rejects_start_symbol_equal_to_pad():
    with pytest.raises(ValueError, match="start_symbol=0 is the padding id"):
        greedy_decode(Scripted(), scripted_src(), None, 5, start_symbol=0, pad=0)


# ================================================================ 8. Part I and the engine agree
@pytest.fixture(scope="module")
def agreement_cases(copy_model):
    """name -> (model, src, src_mask, start, end): the copy-trained model, whose outputs copy the
    source, and random models (post-norm and pre-norm) whose outputs end at different steps."""
    _, copy_src = padded_sources()
    copy_mask = (copy_src != PAD).unsqueeze(-2)
    # the copy task has no end symbol: a token the model writes second in row 1 stands in for one
    end = greedy_decode(copy_model, copy_src, copy_mask, 10, start_symbol=1)[1, 2].item()
    cases = {"copy-trained": (copy_model, copy_src, copy_mask, 1, end)}
    src, src_mask = random_batch(B=6)
    for norm_first in (False, True):
        model = random_model(norm_first=norm_first)
        cases[f"random-{'pre' if norm_first else 'post'}-norm"] = (model, src, src_mask, START, END)
    return cases


CASES = ["copy-trained", "random-post-norm", "random-pre-norm"]


def assert_not_trivial(outputs: list[list[int]], end: int) -> None:
    "Outputs that could tell two searches apart: of different lengths, with more than one token."
    assert len({len(o) for o in outputs}) > 1, outputs
    assert len({t for o in outputs for t in o} - {end}) > 1, outputs


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("cached", [True, False])
def test_part_one_greedy_decode_equals_greedy_search(agreement_cases, case, cached: bool) -> None:
    model, src, src_mask, start, end = agreement_cases[case]
    reference = greedy_decode(model, src, src_mask, 10, start, end_symbol=end)
    found = greedy_search(model, src, src_mask, 10, start, end, cached=cached)
    expected = [up_to_end(row, end) for row in reference[:, 1:].tolist()]
    assert [tokens for tokens, _ in found] == expected
    assert_not_trivial(expected, end)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("K", [1, 2, 3, 4])
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_part_one_beam_decode_equals_beam_search(agreement_cases, case, K, alpha) -> None:
    model, src, src_mask, start, end = agreement_cases[case]
    for cached in (True, False):
        found = beam_search(
            model, src, src_mask, 10, start, end, beam_size=K, alpha=alpha, cached=cached
        )
        for i, hypotheses in enumerate(found):
            one = beam_decode(model, src[i : i + 1], src_mask[i : i + 1], 10, start, end, K, alpha)
            assert [h.tokens for h in hypotheses] == [h.tokens for h in one]
            assert [h.score for h in hypotheses] == pytest.approx([h.score for h in one], abs=1e-5)
    assert_not_trivial([h.tokens for hypotheses in found for h in hypotheses], end)
    if K > 1:  # several hypotheses per sentence, not one
        assert max(len(hypotheses) for hypotheses in found) > 1


def test_part_one_beam_decode_finds_what_greedy_misses() -> None:
    """On the tiny model where greedy decoding misses the best output, beam_decode with a wide beam
    finds it, as beam_search does: the agreement above is not that of two greedy searches."""
    model = tiny_model(27)
    src, mask = torch.tensor([[1, 2, 3, 2]]), torch.ones(1, 1, 4, dtype=torch.bool)
    greedy = greedy_decode(model, src, mask, 5, 0)[0, 1:].tolist()
    [best, *_] = beam_decode(model, src, mask, 5, 0, 1, beam_size=16, alpha=0.6)
    assert best.tokens != up_to_end(greedy, 1)
    tokens, score = beam_search(model, src, mask, 5, 0, 1, beam_size=16, alpha=0.6)[0][0]
    assert best.tokens == tokens and best.score == pytest.approx(score, abs=1e-5)
