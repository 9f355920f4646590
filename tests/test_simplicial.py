"""2-simplicial attention and blocks: fast vs paper-literal paths, masks, invariances, bad input."""
import itertools, math
from dataclasses import replace

import pytest
import torch

from relbook.simplicial import (OneSimplicialAttention, TwoSimplicialAttention, SimplicialConfig, SimplicialEncoder,
                                RELATIONAL, SIMPLICIAL, one_simplicial_reference, two_simplicial_reference,
                                propagate_pairs, triple_logits, virtual_mask, benchmark_attention, loglog_slope, official_init_)
from relbook.clifford import triple_product


def _pad(b, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    keep = torch.rand(b, n, generator=g) > 0.3
    keep[:, 0] = True                                         # at least one kept entity per item
    return keep


@pytest.mark.parametrize("m,heads,padded", list(itertools.product([0, 1, 3], [1, 2], [False, True])))
def test_one_simplicial_fast_matches_reference(m, heads, padded):
    torch.manual_seed(m + 10 * heads)
    attn = OneSimplicialAttention(8, n_heads=heads, d_head=4, n_virtual=m).double()
    x = torch.randn(2, 5 + m, 8, dtype=torch.float64)
    pm = _pad(2, 5) if padded else None
    fast = attn(x, pm)
    assert torch.allclose(fast, one_simplicial_reference(attn, x, pm), atol=1e-12)
    assert torch.allclose(attn(x, pm, return_attention=True)[0], fast, atol=1e-12)


@pytest.mark.parametrize("m,heads,padded,order", [
    (m, h, p, o) for m, h, p, o in itertools.product([0, 2, 3], [1, 2], [False, True], ['auto', 'pairs', 'queries'])
    if not (m and p and o == 'queries')])
def test_two_simplicial_fast_matches_reference(m, heads, padded, order):
    torch.manual_seed(3 * m + heads)
    attn = TwoSimplicialAttention(9, n_heads=heads, d_head=4, n_virtual=m, logit_scale=0.7).double()
    x = torch.randn(2, 5 + m, 9, dtype=torch.float64)
    pm = _pad(2, 5, seed=m) if padded else None
    fast = attn(x, pm, order=order)
    assert fast.shape == (2, 5 + m, heads * 4)
    assert torch.allclose(fast, two_simplicial_reference(attn, x, pm), atol=1e-12)


def test_contraction_orders_agree_float32():
    torch.manual_seed(0)
    A = torch.rand(3, 2, 7, 4, 4).flatten(-2).softmax(-1).view(3, 2, 7, 4, 4)
    u, B = torch.randn(3, 2, 4, 6), torch.randn(2, 6, 6, 6)
    assert torch.allclose(propagate_pairs(A, u, B, 'pairs'), propagate_pairs(A, u, B, 'queries'), atol=1e-4)


def test_triple_logits_are_definition_2_1():
    torch.manual_seed(1)
    p, l1, l2 = torch.randn(2, 1, 5, 3, dtype=torch.float64), torch.randn(2, 1, 4, 3, dtype=torch.float64), torch.randn(2, 1, 4, 3, dtype=torch.float64)
    L = triple_logits(p, l1, l2)
    ref = triple_product(p[:, :, :, None, None], l1[:, :, None, :, None], l2[:, :, None, None, :])
    assert torch.allclose(L, ref, atol=1e-12)


def test_virtual_rows_receive_their_value_and_masks():
    torch.manual_seed(2)
    attn = TwoSimplicialAttention(6, n_heads=2, d_head=3, n_virtual=2)
    x = torch.randn(4, 7, 6)
    u = attn.project(x)[3]                                    # (b, h, L, d)
    out = attn(x)
    assert torch.equal(out[:, 5:], u[:, :, 5:].transpose(1, 2).reshape(4, 2, 6))
    allowed = virtual_mask(5, 2)
    assert not allowed[0, 0, :5, 5:].any() and allowed[0, 0, 5:].all()


def test_padded_entities_do_not_leak_through_encoder():
    torch.manual_seed(3)
    for cfg in (RELATIONAL, SIMPLICIAL, replace(SIMPLICIAL, n_virtual=0), replace(SIMPLICIAL, shared=False, n_iter=3)):
        enc = SimplicialEncoder(replace(cfg, d_model=12, d_head=4, d_head2=4, d_ff=8)).double()
        e = torch.randn(2, 8, 12, dtype=torch.float64)
        pad = torch.ones(2, 8, dtype=torch.bool); pad[:, 6:] = False
        e2 = e.clone(); e2[:, 6:] += 3.0
        assert torch.allclose(enc(e, pad)[:, :6], enc(e2, pad)[:, :6], atol=1e-12)


def test_gradients_finite_at_zero_entity():
    x = torch.randn(2, 6, 8, dtype=torch.float64); x[:, 2] = 0.0
    x.requires_grad_(True)
    enc = SimplicialEncoder(replace(SIMPLICIAL, d_model=8, d_head=4, d_head2=4, d_ff=8, n_virtual=0)).double()
    enc(x).pow(2).sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in enc.parameters() if p.grad is not None)


def test_weight_sharing_and_parameter_layout():
    enc = SimplicialEncoder(SIMPLICIAL)
    assert len(enc.weights) == 1 and len(enc.norms) == 2
    assert enc.weights[0].attn2.B.shape == (1, 48, 48, 48)
    assert enc.weights[0].attn1.qkv.bias is None             # no bias, no output projection (official code)
    assert len(SimplicialEncoder(replace(SIMPLICIAL, shared=False)).weights) == 2
    assert SimplicialEncoder(RELATIONAL).weights[0].attn2 is None


def test_encoder_trains_a_step():
    torch.manual_seed(4)
    enc = SimplicialEncoder(SIMPLICIAL)
    opt = torch.optim.Adam(enc.parameters(), 1e-3)
    e, target = torch.randn(4, 10, 64), torch.randn(4, 10, 64)
    losses = []
    for _ in range(5):
        loss = (enc(e) - target).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step(); losses.append(loss.item())
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("make,match", [
    (lambda: SimplicialConfig(n_virtual=-1), 'n_virtual must be'),
    (lambda: SimplicialConfig(d_model=0), 'd_model must be'),
    (lambda: SimplicialConfig(logit_scale=-1.0), 'logit_scale must be'),
    (lambda: OneSimplicialAttention(8, n_virtual=1.5), 'n_virtual must be'),
    (lambda: OneSimplicialAttention(8, n_virtual=True), 'n_virtual must be'),
    (lambda: TwoSimplicialAttention(8, n_virtual=False), 'n_virtual must be'),
    (lambda: SimplicialConfig(n_heads2=0, n_virtual=2), 'needs n_heads2 > 0'),
    (lambda: official_init_(OneSimplicialAttention(8)), 'enc must be a SimplicialEncoder'),
    (lambda: TwoSimplicialAttention(8, n_heads=0), 'n_heads must be'),
    (lambda: TwoSimplicialAttention(8, n_virtual=2)(torch.randn(2, 2, 8)), 'at least one standard entity'),
    (lambda: TwoSimplicialAttention(8)(torch.randn(2, 5, 7)), 'x must have shape'),
    (lambda: TwoSimplicialAttention(8)(torch.randn(2, 5, 8), torch.ones(2, 5)), 'pad_mask must be a bool'),
    (lambda: OneSimplicialAttention(8)(torch.randn(2, 5, 8), torch.ones(2, 4, dtype=torch.bool)), 'pad_mask must have shape'),
    (lambda: SimplicialEncoder(SIMPLICIAL)(torch.randn(3, 64)), 'e must have shape'),
])
def test_bad_input_raises(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_benchmark_runs_and_virtual_form_is_cheaper():
    df = benchmark_attention(Ns=(8, 16, 32), Ms=(2,), batch=2, full_max_n=32, repeats=1)
    assert set(df.kind) == {'1-simplicial (SDPA)', '2-simplicial, full', '2-simplicial, virtual'}
    assert (df.ms > 0).all() and (df.peak_mb >= 0).all()
    full, virt = (df[df.kind == k].set_index('N').peak_mb for k in ('2-simplicial, full', '2-simplicial, virtual'))
    assert full[32] > virt[32]                                  # N³ logits vs N·M²
    assert loglog_slope(df[df.kind == '2-simplicial, full'], 'N', 'peak_mb') > 1.5


def test_official_init_draws_as_keras_and_keeps_b():
    torch.manual_seed(0)
    enc = SimplicialEncoder(replace(SIMPLICIAL, shared=False))
    B = [w.attn2.B.clone() for w in enc.weights]
    assert official_init_(enc) is enc
    for w, b in zip(enc.weights, B):
        for lin in (w.attn1.qkv, w.attn2.E, w.dense1, w.dense2):
            bound = math.sqrt(6 / (lin.in_features + lin.out_features))
            assert lin.weight.abs().max() <= bound and lin.weight.abs().max() > 0.95 * bound
            assert lin.bias is None or not lin.bias.any()
        assert torch.equal(w.attn2.B, b)
    assert enc.virtual.abs().max() <= 0.05
    official_init_(SimplicialEncoder(RELATIONAL))          # no 2-simplicial heads, no virtual entities: fine
