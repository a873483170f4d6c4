"""Tests for annotated_transformer.model.

What is checked:
1. Equivalence with PyTorch's own Transformer blocks (identical weights, dropout 0, float32, 1e-5),
   for post-norm and pre-norm.
2. The fast attention path (SDPA) against the readable `attention()` path, fully masked rows
   included.
3. Shapes of every block; 4. the model's maximum length; 5. causality and padding invariance;
6. parameter counts and weight tying; 7. clear errors on bad input, nonsensical sizes and dropout
   included, and sizes beyond MAX_SIZES (refused by `make_model` before it builds anything, and by
   `ModelConfig` when made); 8. Table 3's variations: narrower keys (d_k) and learned positions
   change exactly the parameters they name; 9. what the chapter states without a cell of its own:
   eq. (4)'s "linear function of PE_pos" (a rotation, exact at every position) and PyTorch's
   `nn.LayerNorm` computing the paper's layer normalization; 10. the model's incremental step
   (Part II, nbs/17_fast_decoding.ipynb's `model_step`): step by step equals the full decode, a
   wrong cache gives a wrong step, rotary positions need one overridden method (`heads`), the
   export's accessors, and the model module holding the model alone. The values of eq. (4), the
   embedding scale and `subsequent_mask` are checked where Part 1 shows them (nbs/01_model.ipynb);
   the named sizes in tests/test_config.py; `attention_weights` in tests/test_visualization.py and
   nbs/18_figures.ipynb; the checks of every hyperparameter in nbs/01_model.ipynb.

Everything runs on a CPU in a few seconds and needs no data or network.
"""

from __future__ import annotations

import copy
import re
from dataclasses import replace

import pytest
import torch
from torch import nn

from annotated_transformer import model as model_module
from annotated_transformer.config import preset
from annotated_transformer.fast_decoding import (
    DecoderCache,
    KVCache,
    encodings,
    model_step,
    norm_first,
    norms,
    projections,
)
from annotated_transformer.model import (
    MAX_SIZES,
    Decoder,
    DecoderLayer,
    Embeddings,
    Encoder,
    EncoderDecoder,
    EncoderLayer,
    Generator,
    ModelConfig,
    MultiHeadedAttention,
    PositionalEncoding,
    PositionwiseFeedForward,
    attention,
    check_sizes,
    count_parameters,
    make_model,
    subsequent_mask,
)

D_MODEL, N_HEADS, D_FF = 32, 4, 64
TOL = dict(atol=1e-5, rtol=1e-5)
NORM_FIRST = pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# --------------------------------------------------------------------------- helpers


def randomize_(module: nn.Module) -> nn.Module:
    """Give every parameter (LayerNorm weights and biases included) distinct random values, so a
    mis-copied weight shows."""
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.2)
    return module


def key_mask(lengths: list[int], S: int) -> torch.Tensor:
    """Our padding mask (B, 1, S), True = real token (may be attended); sequence b has lengths[b]
    real tokens, then padding."""
    return (torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]).unsqueeze(1)


def our_mha(d_model: int = D_MODEL, h: int = N_HEADS) -> MultiHeadedAttention:
    return MultiHeadedAttention(h, d_model, dropout=0.0)


def our_ffn() -> PositionwiseFeedForward:
    return PositionwiseFeedForward(D_MODEL, D_FF, dropout=0.0)


def our_encoder_layer(norm_first: bool) -> EncoderLayer:
    return randomize_(EncoderLayer(D_MODEL, our_mha(), our_ffn(), 0.0, norm_first))


def our_decoder_layer(norm_first: bool) -> DecoderLayer:
    return randomize_(DecoderLayer(D_MODEL, our_mha(), our_mha(), our_ffn(), 0.0, norm_first))


# One helper per direction of copying: ours -> PyTorch, for each kind of block.


@torch.no_grad()
def copy_linear(ours: nn.Linear, theirs: nn.Linear) -> None:
    theirs.weight.copy_(ours.weight)
    theirs.bias.copy_(ours.bias)


@torch.no_grad()
def copy_norm(ours: nn.LayerNorm, theirs: nn.LayerNorm) -> None:
    assert ours.eps == theirs.eps
    theirs.weight.copy_(ours.weight)
    theirs.bias.copy_(ours.bias)


@torch.no_grad()
def copy_attention(ours: MultiHeadedAttention, theirs: nn.MultiheadAttention) -> None:
    """Our separate w_q, w_k, w_v are the three row blocks of PyTorch's packed in_proj; w_o is
    out_proj."""
    theirs.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
    theirs.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
    copy_linear(ours.w_o, theirs.out_proj)


def copy_feed_forward(ours: PositionwiseFeedForward, theirs: nn.Module) -> None:
    copy_linear(ours.w_1, theirs.linear1)
    copy_linear(ours.w_2, theirs.linear2)


def copy_encoder_layer(ours: EncoderLayer, theirs: nn.TransformerEncoderLayer) -> None:
    copy_attention(ours.self_attn, theirs.self_attn)
    copy_feed_forward(ours.feed_forward, theirs)
    for sub, norm in zip(ours.sublayer, [theirs.norm1, theirs.norm2], strict=True):
        copy_norm(sub.norm, norm)


def copy_decoder_layer(ours: DecoderLayer, theirs: nn.TransformerDecoderLayer) -> None:
    copy_attention(ours.self_attn, theirs.self_attn)
    copy_attention(ours.src_attn, theirs.multihead_attn)
    copy_feed_forward(ours.feed_forward, theirs)
    for sub, norm in zip(ours.sublayer, [theirs.norm1, theirs.norm2, theirs.norm3], strict=True):
        copy_norm(sub.norm, norm)


def torch_encoder_layer(norm_first: bool) -> nn.TransformerEncoderLayer:
    return nn.TransformerEncoderLayer(
        D_MODEL, N_HEADS, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first
    )


# Each comparison runs twice: in train mode with autograd on (dropout is 0, so this is
# deterministic; PyTorch runs its plain reference code) and in eval mode under no_grad (PyTorch may
# take its fused "fast path", a different implementation, which is what inference with PyTorch would
# use).
MODES = pytest.mark.parametrize("mode", ["train", "eval-no-grad"])


def set_mode(mode: str, *modules: nn.Module):
    "Put `modules` in `mode`; returns the autograd context to run them under."
    for m in modules:
        m.train(mode == "train")
    return torch.enable_grad() if mode == "train" else torch.no_grad()


# --------------------------------------------------------------------------- 1. against PyTorch


@MODES
@NORM_FIRST
def test_encoder_layer_matches_pytorch(norm_first, mode):
    ours = our_encoder_layer(norm_first)
    theirs = torch_encoder_layer(norm_first)
    copy_encoder_layer(ours, theirs)
    B, S = 3, 7
    x = torch.randn(B, S, D_MODEL)
    keep = key_mask([7, 4, 1], S)  # True = real token
    # Only keys are masked; padded query rows still attend to the real tokens, so every row is
    # defined.
    with set_mode(mode, ours, theirs):
        expected = theirs(x, src_key_padding_mask=~keep[:, 0])
        actual = ours(x, keep)
    assert torch.isfinite(actual).all()
    torch.testing.assert_close(actual, expected, **TOL)


@MODES
@NORM_FIRST
@pytest.mark.parametrize("padding", ["right", "left"])
def test_decoder_layer_matches_pytorch(norm_first, padding, mode):
    ours = our_decoder_layer(norm_first)
    theirs = nn.TransformerDecoderLayer(
        D_MODEL, N_HEADS, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first
    )
    copy_decoder_layer(ours, theirs)
    B, T, S = 3, 6, 5
    x, memory = torch.randn(B, T, D_MODEL), torch.randn(B, S, D_MODEL)
    src_keep = key_mask([5, 3, 2], S)  # (B, 1, S)
    tgt_keep = key_mask([6, 4, 2], T)  # (B, 1, T)
    if padding == "left":
        tgt_keep = tgt_keep.flip(-1)
    # Ours: one (B, T, T) mask, True = may attend. PyTorch: bool masks with True = masked out.
    tgt_mask = subsequent_mask(T) & tgt_keep
    with set_mode(mode, ours, theirs):
        expected = theirs(
            x,
            memory,
            tgt_mask=~subsequent_mask(T)[0],
            tgt_key_padding_mask=~tgt_keep[:, 0],
            memory_key_padding_mask=~src_keep[:, 0],
        )
        actual = ours(x, memory, src_keep, tgt_mask)
    assert torch.isfinite(actual).all()
    # With right padding every query row keeps at least key 0, so all rows are well defined and
    # compared. With left padding the first query rows of a padded sequence attend to nothing at all
    # (causal mask AND padding). Ours gives them zero attention weights (finite output); PyTorch's
    # train path does too, but its eval/no-grad fast path gives NaN there. Those rows are padding
    # whose outputs are never used (no later real position can attend to them either), so only the
    # real target positions are compared.
    rows = tgt_keep[:, 0]  # (B, T): real target positions
    torch.testing.assert_close(actual[rows], expected[rows], **TOL)
    if padding == "right":
        torch.testing.assert_close(actual, expected, **TOL)


@MODES
@pytest.mark.parametrize("kind", ["self", "cross"])
@pytest.mark.parametrize("masked", [False, True], ids=["no-mask", "key-padding"])
def test_multi_headed_attention_matches_pytorch(kind, masked, mode):
    ours = randomize_(our_mha())
    theirs = nn.MultiheadAttention(D_MODEL, N_HEADS, dropout=0.0, batch_first=True)
    copy_attention(ours, theirs)
    B, Lq = 3, 6
    Lk = Lq if kind == "self" else 9  # cross-attention: a different key length
    query = torch.randn(B, Lq, D_MODEL)
    key = query if kind == "self" else torch.randn(B, Lk, D_MODEL)
    keep = key_mask([Lk, Lk - 2, 1], Lk) if masked else None
    with set_mode(mode, ours, theirs):
        expected, expected_w = theirs(
            query,
            key,
            key,
            key_padding_mask=None if keep is None else ~keep[:, 0],
            need_weights=True,
            average_attn_weights=False,
        )
        out_fast, w_none = ours(query, key, key, keep)  # SDPA path
        out_ref, weights = ours(query, key, key, keep, need_weights=True)  # readable path
    assert w_none is None
    assert weights.shape == (B, N_HEADS, Lq, Lk)
    torch.testing.assert_close(out_fast, expected, **TOL)
    torch.testing.assert_close(out_ref, expected, **TOL)
    torch.testing.assert_close(weights, expected_w, **TOL)
    if keep is not None:  # padded keys get zero weight, exact: the mask sets it
        assert (weights.masked_select(~keep[:, None].expand_as(weights)) == 0).all()


@MODES
@NORM_FIRST
def test_encoder_stack_matches_pytorch(norm_first, mode):
    N = 2
    ours = randomize_(Encoder(EncoderLayer(D_MODEL, our_mha(), our_ffn(), 0.0, norm_first), N))
    # Post-norm: no final norm on either side. Pre-norm: ours ends with a LayerNorm, so PyTorch gets
    # one too.
    final_norm = nn.LayerNorm(D_MODEL) if norm_first else None
    assert isinstance(ours.norm, nn.LayerNorm if norm_first else nn.Identity)
    theirs = nn.TransformerEncoder(
        torch_encoder_layer(norm_first), num_layers=N, norm=final_norm, enable_nested_tensor=False
    )
    for layer_ours, layer_theirs in zip(ours.layers, theirs.layers, strict=True):
        copy_encoder_layer(layer_ours, layer_theirs)
    if norm_first:
        copy_norm(ours.norm, theirs.norm)
    # randomize_ gave the two layers different weights, so a layer mix-up would show.
    assert not torch.equal(ours.layers[0].self_attn.w_q.weight, ours.layers[1].self_attn.w_q.weight)
    B, S = 2, 8
    x = torch.randn(B, S, D_MODEL)
    keep = key_mask([8, 5], S)
    with set_mode(mode, ours, theirs):
        expected = theirs(x, src_key_padding_mask=~keep[:, 0])
        actual = ours(x, keep)
    torch.testing.assert_close(actual, expected, **TOL)


# -------------------------------------------------------------------- 2. fast path vs readable path


def _masks(B: int, Lq: int, Lk: int) -> dict[str, torch.Tensor | None]:
    causal = torch.ones(Lq, Lk, dtype=torch.bool).tril()
    pad = key_mask([Lk, Lk - 3], Lk)  # (B, 1, Lk)
    return {
        "none": None,
        "key-padding": pad,
        "causal(1,Lq,Lk)": causal[None],
        "causal&padding": causal[None] & pad,
    }


@pytest.mark.parametrize("mask_name", list(_masks(2, 5, 5)))
def test_fast_path_equals_reference_path(mask_name):
    mha = randomize_(MultiHeadedAttention(N_HEADS, D_MODEL, dropout=0.1)).eval()
    B, L = 2, 5
    x = torch.randn(B, L, D_MODEL)
    mask = _masks(B, L, L)[mask_name]
    fast, none = mha(x, x, x, mask)
    ref, weights = mha(x, x, x, mask, need_weights=True)
    assert none is None and weights is not None
    torch.testing.assert_close(fast, ref, **TOL)
    torch.testing.assert_close(
        weights.sum(-1), torch.ones(B, N_HEADS, L)
    )  # each row a distribution


def test_fully_padded_source_is_finite_and_paths_agree():
    mha = randomize_(MultiHeadedAttention(N_HEADS, D_MODEL, dropout=0.1)).eval()
    B, Lq, Lk = 2, 4, 6
    query, memory = torch.randn(B, Lq, D_MODEL), torch.randn(B, Lk, D_MODEL)
    keep = key_mask([Lk, 0], Lk)  # second source sequence: every position is padding
    assert not keep[1].any()
    fast, _ = mha(query, memory, memory, keep)
    ref, weights = mha(query, memory, memory, keep, need_weights=True)
    assert torch.isfinite(fast).all(), "SDPA path gives NaN for a row with no key to attend to"
    assert torch.isfinite(ref).all(), "reference path gives NaN for a row with no key to attend to"
    torch.testing.assert_close(fast, ref, **TOL)
    # No key at all: zero weights, so the output is just the output projection's bias.
    assert (weights[1] == 0).all()  # exact: masked, set to 0
    torch.testing.assert_close(ref[1], mha.w_o.bias.expand(Lq, D_MODEL), **TOL)
    # The fully padded row must not disturb the other batch element.
    alone, _ = mha(query[:1], memory[:1], memory[:1], keep[:1])
    torch.testing.assert_close(fast[:1], alone, **TOL)


def test_attention_function_fully_masked_row():
    q, k, v = torch.randn(1, 3, 8), torch.randn(1, 4, 8), torch.randn(1, 4, 8)
    mask = torch.ones(1, 3, 4, dtype=torch.bool)
    mask[0, 1] = False  # query 1 may attend to nothing
    out, p = attention(q, k, v, mask)
    assert torch.isfinite(out).all()
    assert (p[0, 1] == 0).all() and (out[0, 1] == 0).all()
    torch.testing.assert_close(p[0, [0, 2]].sum(-1), torch.ones(2))


# --------------------------------------------------------------------------- 3. shapes


def test_block_shapes():
    B, S, T, V = 2, 7, 5, 11
    src, tgt = torch.randint(0, V, (B, S)), torch.randint(0, V, (B, T))
    x_src, x_tgt = torch.randn(B, S, D_MODEL), torch.randn(B, T, D_MODEL)
    src_mask, tgt_mask = key_mask([S, 3], S), subsequent_mask(T)
    dec_layer = DecoderLayer(D_MODEL, our_mha(), our_mha(), our_ffn(), 0.0)
    enc_layer = EncoderLayer(D_MODEL, our_mha(), our_ffn(), 0.0)

    assert Embeddings(D_MODEL, V)(src).shape == (B, S, D_MODEL)
    assert PositionalEncoding(D_MODEL, 0.0)(x_src).shape == (B, S, D_MODEL)
    assert our_ffn()(x_src).shape == (B, S, D_MODEL)
    out, w = our_mha()(x_tgt, x_src, x_src, src_mask, need_weights=True)
    assert out.shape == (B, T, D_MODEL) and w.shape == (B, N_HEADS, T, S)
    assert enc_layer(x_src, src_mask).shape == (B, S, D_MODEL)
    assert dec_layer(x_tgt, x_src, src_mask, tgt_mask).shape == (B, T, D_MODEL)
    assert Encoder(enc_layer, 2)(x_src, src_mask).shape == (B, S, D_MODEL)
    assert Decoder(dec_layer, 2)(x_tgt, x_src, src_mask, tgt_mask).shape == (B, T, D_MODEL)
    logp = Generator(D_MODEL, V)(x_tgt)
    assert logp.shape == (B, T, V)
    torch.testing.assert_close(logp.exp().sum(-1), torch.ones(B, T))

    model = make_model(V, V + 2, N=2, d_model=D_MODEL, d_ff=D_FF, h=N_HEADS).eval()
    assert isinstance(model, EncoderDecoder)
    memory = model.encode(src, src_mask)
    assert memory.shape == (B, S, D_MODEL)
    assert model.decode(memory, src_mask, tgt, tgt_mask).shape == (B, T, D_MODEL)
    assert model(src, tgt, src_mask, tgt_mask).shape == (B, T, D_MODEL)
    assert model.generator(model(src, tgt, src_mask, tgt_mask)).shape == (B, T, V + 2)


# --------------------------------------------------------------------------- 4. maximum length


@pytest.mark.parametrize("max_len", [3, 5000])
def test_max_len_is_the_positional_table_length(max_len):
    model = replace(preset("tiny"), max_len=max_len).build(11, 11).eval()
    assert model.max_len == max_len
    assert model.src_embed[1].max_len == model.tgt_embed[1].max_len == max_len


def test_max_len_bounds_both_source_and_target():
    model = make_model(11, 11, N=1, d_model=D_MODEL, d_ff=D_FF, h=N_HEADS, max_len=6).eval()
    L = model.max_len
    src, src_mask = torch.ones(1, L, dtype=torch.long), torch.ones(1, 1, L, dtype=torch.bool)
    memory = model.encode(src, src_mask)  # exactly max_len fits
    assert model.decode(memory, src_mask, src, subsequent_mask(L)).shape == (1, L, D_MODEL)
    longer = torch.ones(1, L + 1, dtype=torch.long)
    with pytest.raises(ValueError, match=f"length {L + 1} is over max_len={L}"):
        model.encode(longer, torch.ones(1, 1, L + 1, dtype=torch.bool))
    with pytest.raises(ValueError, match=f"length {L + 1} is over max_len={L}"):
        model.decode(memory, src_mask, longer, subsequent_mask(L + 1))


def test_max_len_of_unequal_tables_is_the_shorter():
    "A hand-built model whose tables differ can take no more than the shorter one on either side."
    model = make_model(11, 11, N=1, d_model=D_MODEL, d_ff=D_FF, h=N_HEADS, max_len=9)
    model.tgt_embed[1] = PositionalEncoding(D_MODEL, 0.0, max_len=4)
    assert model.max_len == 4


# -------------------------------------------------------------- 5. causality and padding invariance


def tiny_model(norm_first: bool, vocab: int = 13) -> EncoderDecoder:
    return replace(preset("tiny"), norm_first=norm_first).build(vocab, vocab).eval()


@NORM_FIRST
def test_decoder_is_causal(norm_first):
    V, B, S, T = 13, 2, 6, 8
    model = tiny_model(norm_first, V)
    assert model.encoder.layers[0].sublayer[0].norm_first is norm_first
    src, tgt = torch.randint(0, V, (B, S)), torch.randint(0, V, (B, T))
    src_mask = key_mask([S, 4], S)
    tgt_mask = subsequent_mask(T)
    with torch.no_grad():
        base = model(src, tgt, src_mask, tgt_mask)
        for i in [0, 3, T - 2]:
            changed = tgt.clone()
            changed[:, i + 1 :] = (
                changed[:, i + 1 :] + 1 + torch.randint(0, V - 1, changed[:, i + 1 :].shape)
            ) % V
            assert (changed[:, i + 1 :] != tgt[:, i + 1 :]).all()
            out = model(src, changed, src_mask, tgt_mask)
            torch.testing.assert_close(out[:, : i + 1], base[:, : i + 1], **TOL)
            # ...and the future positions do see their own (changed) tokens.
            assert (out[:, i + 1 :] - base[:, i + 1 :]).abs().amax(-1).min() > 1e-3


@NORM_FIRST
def test_masked_source_positions_are_ignored(norm_first):
    V, B, S, T = 13, 2, 7, 5
    model = tiny_model(norm_first, V)
    src, tgt = torch.randint(0, V, (B, S)), torch.randint(0, V, (B, T))
    src_mask = key_mask([S, 3], S)
    tgt_mask = subsequent_mask(T)
    other = src.clone()
    other[1, 3:] = (other[1, 3:] + 1) % V  # only masked (padding) positions change
    with torch.no_grad():
        mem, mem_other = model.encode(src, src_mask), model.encode(other, src_mask)
        out, out_other = model(src, tgt, src_mask, tgt_mask), model(other, tgt, src_mask, tgt_mask)
        torch.testing.assert_close(mem[src_mask[:, 0]], mem_other[src_mask[:, 0]], **TOL)
        torch.testing.assert_close(out, out_other, **TOL)
        # Sanity: changing a real (unmasked) source token does change the output.
        real = src.clone()
        real[1, 0] = (real[1, 0] + 1) % V
        assert (model(real, tgt, src_mask, tgt_mask)[1] - out[1]).abs().max() > 1e-3


# --------------------------------------------------------------------------- 6. parameter counts


def test_parameter_count_base_untied():
    model = make_model(37000, 37000)
    assert count_parameters(model) == 101_007_496  # ≈ 101.0M


def _assert_tied(model: EncoderDecoder) -> None:
    w = model.src_embed[0].lut.weight
    assert model.tgt_embed[0].lut.weight is w
    assert model.generator.proj.weight is w


def test_parameter_count_base_shared():
    model = replace(preset("base"), share_embeddings=True).build(37000, 37000)
    _assert_tied(model)
    assert count_parameters(model) == 63_119_496  # ≈ 63.1M


def test_table3_variations_change_exactly_the_parameters_they_name():
    """(B): narrower queries and keys in all 3N attentions; (E): a learned table per side, max_len x
    d_model each."""
    D, h, N, max_len, vocab = 64, 4, 2, 50, 30
    plain = count_parameters(
        make_model(vocab, vocab, N=N, d_model=D, d_ff=128, h=h, max_len=max_len)
    )
    narrow = count_parameters(
        make_model(vocab, vocab, N=N, d_model=D, d_ff=128, h=h, max_len=max_len, d_k=4)
    )
    learned = count_parameters(
        make_model(
            vocab, vocab, N=N, d_model=D, d_ff=128, h=h, max_len=max_len, positions="learned"
        )
    )
    assert plain - narrow == 3 * N * 2 * (D - h * 4) * (
        D + 1
    )  # w_q and w_k: D -> h * d_k, with biases
    assert learned - plain == 2 * max_len * D


def test_learned_positions_train_and_sinusoids_do_not():
    model = make_model(11, 11, N=1, d_model=16, d_ff=32, h=2, max_len=20, positions="learned")
    src = torch.randint(1, 11, (2, 5))
    mask = torch.ones(2, 1, 5, dtype=torch.bool)
    model.encode(src, mask).sum().backward()
    assert (
        model.src_embed[1].pe.grad[0, :5].abs().sum() > 0
        and model.src_embed[1].pe.grad[0, 5:].abs().sum() == 0  # exact: unused, no gradient
    )
    assert "src_embed.1.pe" in model.state_dict()
    assert not any(
        name.endswith(".pe")
        for name in make_model(11, 11, N=1, d_model=16, d_ff=32, h=2).state_dict()
    )


def test_parameter_count_big_shared_on_meta():
    with torch.device("meta"):
        model = replace(preset("big"), share_embeddings=True).build(37000, 37000)
    assert model.src_embed[0].lut.weight.is_meta
    _assert_tied(model)
    assert count_parameters(model) == 214_282_376  # ≈ 214.3M


def test_untied_embeddings_are_distinct():
    model = make_model(11, 11, N=1, d_model=D_MODEL, d_ff=D_FF, h=N_HEADS)
    assert model.tgt_embed[0].lut.weight is not model.src_embed[0].lut.weight
    assert model.generator.proj.weight is not model.src_embed[0].lut.weight


# --------------------------------------------------------------------------- 7. bad input


def test_error_d_model_not_divisible_by_h():
    with pytest.raises(ValueError, match=r"d_model=30 .*h=4"):
        MultiHeadedAttention(4, 30)


def test_error_sequence_longer_than_max_len():
    pe = PositionalEncoding(D_MODEL, 0.0, max_len=10)
    pe(torch.zeros(1, 10, D_MODEL))  # exactly max_len is fine
    with pytest.raises(ValueError, match=r"length 11 .*max_len=10"):
        pe(torch.zeros(1, 11, D_MODEL))


def test_error_mask_shape_cannot_broadcast():
    mha = our_mha()
    x = torch.randn(2, 5, D_MODEL)
    bad = torch.ones(2, 1, 6, dtype=torch.bool)
    msg = re.escape("(2, 1, 6)") + ".*" + re.escape("(2, 5, 5)")
    for need_weights in (False, True):
        with pytest.raises(ValueError, match=msg):
            mha(x, x, x, bad, need_weights=need_weights)
    with pytest.raises(ValueError, match=re.escape("(3, 5, 5)")):  # batch mismatch
        mha(x, x, x, torch.ones(3, 5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=re.escape("(1, 4, 6)") + ".*" + re.escape("(1, 4, 5)")):
        attention(
            torch.randn(1, 4, 8),
            torch.randn(1, 5, 8),
            torch.randn(1, 5, 8),
            torch.ones(1, 4, 6, dtype=torch.bool),
        )


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
def test_error_non_bool_mask(dtype):
    x = torch.randn(2, 5, D_MODEL)
    with pytest.raises(TypeError, match=r"bool tensor.*" + re.escape(str(dtype))):
        our_mha()(x, x, x, torch.ones(2, 1, 5, dtype=dtype))


@pytest.mark.parametrize("bad_id", [10, 57, -1])
def test_error_token_id_outside_vocabulary(bad_id):
    emb = Embeddings(D_MODEL, 10)
    ids = torch.tensor([[0, 9, bad_id, 3]])
    with pytest.raises(ValueError, match=rf"token id {bad_id} .*size 10"):
        emb(ids)


def test_model_compiles_to_one_graph_for_changing_shapes():
    # Part 6: no `if` on a tensor's value in the forward pass (the id check is CPU-eager only), so
    # torch.compile captures the whole model as one graph; fullgraph=True turns any graph break into
    # an error.
    from torch._dynamo.utils import counters

    model = make_model(20, 20, N=2, d_model=D_MODEL, d_ff=D_FF, h=N_HEADS).eval()
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    for S, T in [(5, 4), (7, 6), (9, 3)]:  # three batch shapes, as length bucketing makes them
        src, tgt = torch.randint(1, 20, (2, S)), torch.randint(1, 20, (2, T))
        src_mask, tgt_mask = (
            torch.ones(2, 1, S, dtype=torch.bool),
            subsequent_mask(T).expand(2, T, T),
        )
        torch.testing.assert_close(
            compiled(src, tgt, src_mask, tgt_mask), model(src, tgt, src_mask, tgt_mask)
        )
    assert (
        counters["stats"]["unique_graphs"] <= 2
    )  # the first shape, then one graph with dynamic lengths
    torch._dynamo.reset()


def test_error_share_embeddings_with_different_vocabs():
    with pytest.raises(ValueError, match=r"src_vocab=10 and tgt_vocab=12"):
        make_model(10, 12, N=1, d_model=D_MODEL, d_ff=D_FF, h=N_HEADS, share_embeddings=True)


SIZES = dict(
    N=1, d_model=D_MODEL, d_ff=D_FF, h=N_HEADS, dropout=0.1, max_len=50
)  # a valid small model
NOT_POSITIVE = [
    ("N", -1),
    ("N", 0),
    ("h", -4),
    ("h", 0),
    ("d_model", 0),
    ("d_model", -32),
    ("d_ff", 0),
    ("max_len", 0),
    ("d_k", 0),
]
NOT_INTEGER = [
    ("N", 2.5),
    ("d_model", 32.0),
    ("h", "4"),
    ("max_len", None),
    ("N", True),
    ("d_k", 2.5),
]
BAD_DROPOUT = [float("nan"), float("inf"), -0.1, 1.0, 1.5]


@pytest.fixture
def nothing_built(monkeypatch):
    "Fail the test if make_model gets as far as building a layer: the checks must come first."
    import annotated_transformer.model as model_module

    def built(*args, **kwargs):
        raise AssertionError("make_model started building before it checked its arguments")

    monkeypatch.setattr(model_module, "MultiHeadedAttention", built)


@pytest.mark.parametrize("name, value", NOT_POSITIVE + [("src_vocab", 0), ("tgt_vocab", -5)])
def test_error_make_model_size_below_one(name, value, nothing_built):
    args = dict(src_vocab=11, tgt_vocab=11, **SIZES) | {name: value}
    most = f"{MAX_SIZES[name]:,}"
    with pytest.raises(ValueError, match=rf"^{name} must be from 1 to {most}, got {name}={value}$"):
        make_model(**args)


@pytest.mark.parametrize("name, value", NOT_INTEGER + [("src_vocab", 11.0), ("tgt_vocab", None)])
def test_error_make_model_size_not_an_integer(name, value, nothing_built):
    args = dict(src_vocab=11, tgt_vocab=11, **SIZES) | {name: value}
    with pytest.raises(
        TypeError, match=rf"^{name} must be an integer, got {name}={re.escape(repr(value))}$"
    ):
        make_model(**args)


@pytest.mark.parametrize("dropout", BAD_DROPOUT, ids=str)
def test_error_make_model_dropout_outside_unit_interval(dropout, nothing_built):
    with pytest.raises(ValueError, match=rf"^dropout must be in \[0, 1\), got dropout={dropout}$"):
        make_model(11, 11, **SIZES | {"dropout": dropout})


@pytest.mark.parametrize("dropout", ["0.1", None, True], ids=repr)
def test_error_make_model_dropout_not_a_number(dropout, nothing_built):
    with pytest.raises(
        TypeError, match=rf"^dropout must be a number, got dropout={re.escape(repr(dropout))}$"
    ):
        make_model(11, 11, **SIZES | {"dropout": dropout})


CONFIG_ERRORS = (
    [(name, value, ValueError) for name, value in NOT_POSITIVE]
    + [(name, value, TypeError) for name, value in NOT_INTEGER]
    + [("dropout", value, ValueError) for value in BAD_DROPOUT]
)


@pytest.mark.parametrize("name, value, error", CONFIG_ERRORS, ids=str)
def test_error_model_config_refused_when_made(name, value, error):
    # ModelConfig checks in __post_init__: a bad preset override, command-line flag or checkpoint
    # config fails at once
    with pytest.raises(error, match=rf"^{name} must .*, got {name}={re.escape(repr(value))}$"):
        ModelConfig(**SIZES | {name: value})
    with pytest.raises(error, match=rf"{name}={re.escape(repr(value))}"):
        replace(preset("tiny"), **{name: value})


def test_error_unknown_positions_refused_when_made(nothing_built):
    with pytest.raises(
        ValueError, match=r"^positions must be 'sinusoidal' or 'learned', got positions='rotary'$"
    ):
        ModelConfig(positions="rotary")
    with pytest.raises(ValueError, match=r"positions='rotary'"):
        make_model(11, 11, **SIZES, positions="rotary")


def test_error_model_config_heads_must_divide_d_model_when_made():
    with pytest.raises(
        ValueError, match=r"^d_model=100 is not divisible by the number of heads h=8$"
    ):
        ModelConfig(d_model=100, h=8)  # before: accepted, failing only at .build()


@pytest.mark.parametrize("name", sorted(MAX_SIZES))
def test_error_make_model_size_above_its_maximum(name, nothing_built):
    "A size beyond MAX_SIZES (a crafted or mistyped configuration) is refused before building."
    value = MAX_SIZES[name] + 1
    args = dict(src_vocab=11, tgt_vocab=11, **SIZES) | {name: value}
    most = f"{MAX_SIZES[name]:,}"
    with pytest.raises(ValueError, match=rf"^{name} must be from 1 to {most}, got {name}={value}$"):
        make_model(**args)
    if name not in ("src_vocab", "tgt_vocab"):  # made, not built: refused at once
        with pytest.raises(ValueError, match=rf"^{name} must be from 1 to {most}, got "):
            ModelConfig(**SIZES | {name: value})


def test_check_sizes_names_the_first_bad_size():
    check_sizes(N=MAX_SIZES["N"], d_model=1, h=MAX_SIZES["h"])  # the bounds themselves are sizes
    with pytest.raises(ValueError, match="^N must be from 1 to 48, got N=0$"):
        check_sizes(N=0, d_model=-1)
    with pytest.raises(TypeError, match="^d_model must be an integer, got d_model=2.0$"):
        check_sizes(N=1, d_model=2.0)
    with pytest.raises(ValueError, match="^d_ff must be from 1 to 32,768, got d_ff=10000000000$"):
        check_sizes(d_ff=10**10)


# ------------------------------------------------------------- 9. what the chapter states in words
@pytest.mark.parametrize("k", [1, 3, 17])
def test_positional_encoding_of_pos_plus_k_is_a_rotation_of_pos(k: int) -> None:
    """§3.5: "for any fixed offset k, PE_{pos+k} can be represented as a linear function of PE_pos":
    each (sin, cos) pair of frequency w_i turns by the angle w_i k, whatever pos is."""
    d_model = 16
    table = PositionalEncoding(d_model, 0.0, max_len=60).pe[0]  # (60, D)
    omega = torch.exp(torch.arange(0, d_model, 2) * -(torch.log(torch.tensor(10000.0)) / d_model))
    rotation = torch.zeros(d_model, d_model)
    for i, angle in enumerate((omega * k).tolist()):
        c, s = torch.cos(torch.tensor(angle)), torch.sin(torch.tensor(angle))
        rotation[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.stack(
            [torch.stack([c, -s]), torch.stack([s, c])]
        )
    torch.testing.assert_close(table[:-k] @ rotation, table[k:], atol=1e-5, rtol=0)


def test_layer_norm_is_the_papers_with_biased_variance() -> None:
    "The chapter uses `nn.LayerNorm`: (x - mean) / sqrt(biased variance + 1e-5), gain 1, bias 0."
    x = torch.randn(2, 5, 16)
    mu, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    torch.testing.assert_close(nn.LayerNorm(16)(x), (x - mu) / torch.sqrt(var + 1e-5), **TOL)


# ---------------------------------------------------------- 10. the model's own incremental step
STEP_VARIANTS = {
    "post-norm": {},
    "pre-norm": dict(norm_first=True),
    "narrow keys": dict(d_k=3),
    "learned positions": dict(positions="learned"),
    "shared embeddings": dict(share_embeddings=True),
}


def step_setup(seed: int = 0, **variant) -> tuple[EncoderDecoder, torch.Tensor, torch.Tensor]:
    "A small random model in eval mode, its memory of a padded batch, its mask and target ids."
    torch.manual_seed(seed)
    config = ModelConfig(N=2, d_model=D_MODEL, d_ff=D_FF, h=N_HEADS, **variant)
    model = config.build(13, 13).eval()
    src = torch.randint(3, 13, (4, 9))
    src[1, 6:], src[3, 2:] = 0, 0  # two padded sentences
    return model, src, (src != 0).unsqueeze(-2)


def step_all(model: EncoderDecoder, memory, src_mask, ys, beams: int = 1) -> torch.Tensor:
    "The decoder output (B, T, D) of every position, fed one position at a time."
    cache = DecoderCache(model, memory, src_mask, beams)
    with torch.no_grad():
        return torch.stack([model_step(model, ys[:, t], cache) for t in range(ys.size(1))], dim=1)


@pytest.mark.parametrize("variant", list(STEP_VARIANTS), ids=list(STEP_VARIANTS))
def test_step_by_step_equals_the_full_decode(variant: str) -> None:
    model, src, src_mask = step_setup(**STEP_VARIANTS[variant])
    ys = torch.randint(1, 13, (4, 7))
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        full = model.decode(memory, src_mask, ys, subsequent_mask(7))  # (B, T, D)
    torch.testing.assert_close(step_all(model, memory, src_mask, ys), full, **TOL)


def test_the_cache_holds_the_keys_and_values_of_every_position() -> None:
    "After T steps, layer 0's cache holds its self-attention's keys and values of positions 0..T-1."
    model, src, src_mask = step_setup()
    ys = torch.randint(1, 13, (4, 6))
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        cache = DecoderCache(model, memory, src_mask)
        for t in range(6):
            model_step(model, ys[:, t], cache)
        x = model.tgt_embed(ys)  # post-norm: layer 0's self-attention reads its input as it is
        _, keys, values = model.decoder.layers[0].self_attn.heads(x, x, x)
    assert cache.t == 6
    torch.testing.assert_close(cache.layers[0].keys[:, :, :6], keys, **TOL)
    torch.testing.assert_close(cache.layers[0].values[:, :, :6], values, **TOL)


def test_a_wrong_cache_gives_a_wrong_step() -> None:
    """The newest position reads the earlier ones from the cache: with one earlier position's cached
    keys and values swapped between rows, its output no longer matches the full decode."""
    model, src, src_mask = step_setup()
    ys = torch.randint(1, 13, (4, 6))
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        full = model.decode(memory, src_mask, ys, subsequent_mask(6))
        cache = DecoderCache(model, memory, src_mask)
        for t in range(5):
            model_step(model, ys[:, t], cache)
        wrong = copy.deepcopy(cache)
        for kv in wrong.layers:
            kv.keys[:, :, 2], kv.values[:, :, 2] = (
                kv.keys[:, :, 2].flip(0),
                kv.values[:, :, 2].flip(0),
            )
        right_out, wrong_out = (
            model_step(model, ys[:, 5], cache),
            model_step(model, ys[:, 5], wrong),
        )
    torch.testing.assert_close(right_out, full[:, 5], **TOL)
    assert (wrong_out - full[:, 5]).abs().amax(-1).min() > 1e-3  # every row is off


def test_beams_step_as_copies_of_their_sentence_and_follow_select() -> None:
    "K rows a sentence share one source; after a select the rows are those of the reordered batch."
    model, src, src_mask = step_setup()
    K, ys = 2, torch.randint(1, 13, (8, 5))  # 4 sentences x 2 beams
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        each = lambda t: t.repeat_interleave(K, 0)
        full = model.decode(each(memory), each(src_mask), ys, subsequent_mask(5))
        cache = DecoderCache(model, memory, src_mask, beams=K)
        for t in range(4):
            torch.testing.assert_close(model_step(model, ys[:, t], cache), full[:, t], **TOL)
        rows = torch.tensor(
            [7, 6, 3, 3]
        )  # sentence 3's beams swapped, then sentence 1's beam 1 twice
        cache.select(rows)
        torch.testing.assert_close(model_step(model, ys[rows, 4], cache), full[rows, 4], **TOL)
    assert cache.sources[0][0].size(0) == 2 and cache.layers[0].keys.size(0) == 4


def test_a_step_past_the_positional_table_is_refused() -> None:
    model = ModelConfig(N=1, d_model=16, d_ff=32, h=2, max_len=3).build(13, 13).eval()
    src = torch.randint(3, 13, (2, 3))
    cache = DecoderCache(model, model.encode(src, None), torch.ones(2, 1, 3, dtype=torch.bool))
    with torch.no_grad():
        for _ in range(3):
            model_step(model, torch.ones(2, dtype=torch.long), cache)
        with pytest.raises(ValueError, match="^position 3 is beyond the positional-encoding table"):
            model_step(model, torch.ones(2, dtype=torch.long), cache)


def rotate(x: torch.Tensor, start: int) -> torch.Tensor:
    "Rotary positions (Su et al., 2021): feature pair i of position p turned by p / 10000^(2i/d)."
    d, positions = x.size(-1), torch.arange(start, start + x.size(-2), dtype=x.dtype)
    angle = positions[:, None] * 10000 ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)  # (L, d/2)
    even, odd = x[..., 0::2], x[..., 1::2]
    cos, sin = angle.cos(), angle.sin()
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


class RotaryAttention(MultiHeadedAttention):
    "Self-attention with rotary positions: one method overridden, the model's own step included."

    def heads(self, query, key, value, start: int = 0):
        q, k, v = super().heads(query, key, value, start)
        return rotate(q, start), rotate(k, start), v


class StartIgnored(RotaryAttention):
    "A rotary attention that forgets where the step is: every step is position 0."

    def heads(self, query, key, value, start: int = 0):
        return super().heads(query, key, value, 0)


def with_self_attention(model: EncoderDecoder, kind: type) -> EncoderDecoder:
    "A copy of `model` whose decoder self-attention layers are `kind`, with the same weights."
    model = copy.deepcopy(model)
    for layer in model.decoder.layers:
        attn = kind(N_HEADS, D_MODEL, dropout=0.0)
        attn.load_state_dict(layer.self_attn.state_dict())
        layer.self_attn = attn
    return model.eval()


def test_rotary_positions_are_one_overridden_method_and_decode_step_by_step() -> None:
    """Overriding `heads` changes what the decoder computes (positions now act inside attention),
    and the cached step computes the same, because it passes the step's position as `start`; a
    rotary attention that ignored `start` would decode step by step wrongly."""
    model, src, src_mask = step_setup()
    rotary = with_self_attention(model, RotaryAttention)
    ys = torch.randint(1, 13, (4, 7))
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        full = rotary.decode(memory, src_mask, ys, subsequent_mask(7))
        plain = model.decode(memory, src_mask, ys, subsequent_mask(7))
    assert (full - plain).abs().max() > 1e-2  # the override is in effect
    torch.testing.assert_close(step_all(rotary, memory, src_mask, ys), full, **TOL)
    ignored = step_all(with_self_attention(model, StartIgnored), memory, src_mask, ys)
    assert (ignored[:, 1:] - full[:, 1:]).abs().max() > 1e-3


def test_the_export_accessors_name_the_layers_parts() -> None:
    model = ModelConfig(N=2, d_model=D_MODEL, d_ff=D_FF, h=N_HEADS, d_k=3).build(11, 11)
    attn, layer = model.encoder.layers[0].self_attn, model.decoder.layers[1]
    assert {n: lin.out_features for n, lin in projections(attn).items()} == dict(
        q=N_HEADS * 3, k=N_HEADS * 3, v=D_MODEL, o=D_MODEL
    )
    assert all(isinstance(norm, nn.LayerNorm) for norm in norms(layer)) and len(norms(layer)) == 3
    assert norms(layer)[1] is not norms(layer)[2]
    assert norm_first(model) is False
    table = encodings(model.tgt_embed[1])
    assert table.shape == (model.max_len, D_MODEL)
    torch.testing.assert_close(model.tgt_embed[1].eval()(torch.zeros(1, 4, D_MODEL))[0], table[:4])


def test_the_model_module_is_the_model_alone() -> None:
    "Part I's model holds no cache and no incremental step: those are fast_decoding's functions."
    assert not {"KVCache", "DecoderCache", "StaticDecoderCache", "patch_to"} & set(
        model_module.__all__
    )
    for cls in (MultiHeadedAttention, PositionalEncoding, DecoderLayer, EncoderDecoder):
        assert not hasattr(cls, "step"), cls
    assert isinstance(KVCache(1, 1, 1, 1, torch.empty(0)), KVCache)
