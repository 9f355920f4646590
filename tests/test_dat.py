"Tests of relational attention and the Dual Attention Transformer (relbook.dat)."
from dataclasses import replace
import pytest
import torch
from relbook.dat import (DualAttention, DATConfig, DATLanguageModel, DATSeq2Seq, ViDAT, PositionalSymbols,
                         PositionRelativeSymbols, SymbolicAttention, SYMBOL_TYPES, theorem1_check, bench_once,
                         attention_mask, DATStack)
from relbook.harness import Seq2Seq, Classification


def _symbols(kind, d, n, x):
    return {'positional': PositionalSymbols(d, n), 'position_relative': PositionRelativeSymbols(d, 3),
            'symbolic': SymbolicAttention(d, 5, 2)}[kind].double()(x)


@pytest.mark.parametrize('symbol', SYMBOL_TYPES)
@pytest.mark.parametrize('causal', [False, True])
@pytest.mark.parametrize('pad', [False, True])
@pytest.mark.parametrize('extra', [{}, {'symmetric_rels': True}, {'n_kv_heads': 1}, {'rope': True, 'n_kv_heads': 2},
                                   {'head_type': 'rca'}, {'n_relations': 3, 'rel_proj_dim': 5}, {'rel_bias': True},
                                   {'rel_bias': True, 'symmetric_rels': True}])
def test_fast_matches_reference(symbol, causal, pad, extra):
    torch.manual_seed(0)
    d, b, n = 32, 3, 7
    m = DualAttention(d, 2, 2, **extra).double()
    x = torch.randn(b, n, d, dtype=torch.float64)
    s = _symbols(symbol, d, n, x)
    keep = None
    if pad:
        keep = torch.ones(b, n, dtype=torch.bool); keep[0, 5:] = False; keep[1, 0] = False; keep[2, :] = False
    ref = m(x, s, key_padding_mask=keep, causal=causal, impl='reference')
    for impl in ('fast', 'factorised'):
        out = m(x, s, key_padding_mask=keep, causal=causal, impl=impl)
        assert torch.isfinite(out).all()
        assert (out - ref).abs().max() < 1e-12, impl


@pytest.mark.parametrize('symbol', SYMBOL_TYPES)
def test_fast_path_across_query_blocks(symbol, monkeypatch):
    import relbook.dat as dat
    monkeypatch.setattr(dat, 'BLOCK_PAIRS', 16)          # 8 queries per block: 40 queries -> 5 blocks
    torch.manual_seed(0)
    d, b, n = 32, 2, 40
    m = DualAttention(d, 2, 2, symmetric_rels=True).double()
    x = torch.randn(b, n, d, dtype=torch.float64)
    s = _symbols(symbol, d, n, x)
    keep = torch.ones(b, n, dtype=torch.bool); keep[1, 30:] = False
    for causal in (False, True):
        a = m(x, s, key_padding_mask=keep, causal=causal)
        r = m(x, s, key_padding_mask=keep, causal=causal, impl='reference')
        assert (a - r).abs().max() < 1e-12


def test_fully_masked_rows_are_zero_not_nan():
    m = DualAttention(16, 2, 2).double()
    x = torch.randn(1, 4, 16, dtype=torch.float64)
    keep = torch.zeros(1, 4, dtype=torch.bool)
    for impl in ('fast', 'reference'):
        y = m(x, PositionalSymbols(16, 4).double()(x), key_padding_mask=keep, impl=impl)
        assert torch.isfinite(y).all()


def test_symmetric_relations_symmetric_psd():
    m = DualAttention(32, 0, 4, symmetric_rels=True)
    R = m.relations(torch.randn(2, 6, 32))
    assert torch.allclose(R, R.transpose(1, 2), atol=1e-6)
    assert torch.linalg.eigvalsh(R[0].permute(2, 0, 1)).min() > -1e-5
    assert m.rel_k is None


@pytest.mark.parametrize('extra', [{}, {'symmetric_rels': True}, {'n_relations': 3, 'rel_proj_dim': 5}])
def test_relations_have_no_sender_only_term(extra):
    "Bias-free relation maps (the default, as the official code): r(0, y) = 0 for every sender y and r(x, 0) = 0 for every receiver x."
    torch.manual_seed(0)
    x = torch.randn(4, 7, 32, dtype=torch.float64); x[:, 2] = 0
    m = DualAttention(32, 2, 2, **extra).double()
    assert m.rel_q.bias is None and (m.rel_k is None or m.rel_k.bias is None)
    R = m.relations(x)                                                     # (b, n, n, d_r)
    assert R[:, 2].abs().max() == 0 and R[:, :, 2].abs().max() == 0
    assert R[:, :2].abs().max() > 1e-3                                     # the other relations are not all zero
    # with a bias, r(0, y) = <b_q, W_k y + b_k> is a function of the sender alone: not 0, and it varies with y
    Rb = DualAttention(32, 2, 2, rel_bias=True, **extra).double().relations(x)
    assert Rb[:, 2, [0, 1, 3, 4, 5, 6]].std(1).min() > 1e-4
    # and the model's output at a receiver does not depend on a sender's features through r(0, y) when x_i = 0
    assert DATConfig(d_model=32, n_heads_sa=2, n_heads_ra=2).attention().rel_q.bias is None
    assert DATConfig(d_model=32, n_heads_sa=2, n_heads_ra=2, rel_bias=True).attention().rel_q.bias is not None
    with pytest.raises(ValueError, match='rel_bias must be a bool'): DualAttention(32, 2, 2, rel_bias=1)
    with pytest.raises(ValueError, match='rel_bias must be a bool'): DATConfig(rel_bias='yes')
    # attn_bias: which attention projections carry a bias (None follows `bias`; the MLP always follows `bias`)
    has = lambda lin: lin.bias is not None
    for mode, (qkv, out) in {None: (True, True), 'all': (True, True), 'out': (False, True), 'none': (False, False)}.items():
        cfg = DATConfig(d_model=32, n_layers=1, n_heads_sa=2, n_heads_ra=2, attn_bias=mode)
        a = cfg.attention()
        assert [has(a.sa_q), has(a.sa_k), has(a.sa_v), has(a.ra_q), has(a.ra_k), has(a.ra_s)] == [qkv] * 6, mode
        assert [has(a.sa_o), has(a.ra_o)] == [out] * 2 and a.rel_q.bias is None, mode
        dec = DATSeq2Seq(11, 11, cfg, cfg).decoder.blocks[0]
        assert [has(dec.cross.q), has(dec.cross.kv), has(dec.cross.o)] == [qkv, qkv, out] and has(dec.mlp.w1), mode
    assert DATConfig(d_model=32, bias=False).attn_biases() == (False, False)
    off = DATConfig(d_model=32, n_layers=1, n_heads_sa=2, n_heads_ra=2, bias=False, attn_bias='out')   # attn_bias wins over bias
    assert off.attn_biases() == (False, True) and has(off.attention().sa_o) and not has(off.attention().sa_q)
    assert not has(DATSeq2Seq(11, 11, off, off).decoder.blocks[0].mlp.w1)                              # ... the MLP follows bias
    from relbook.dat import CrossAttention
    with pytest.raises(ValueError, match='out_bias must be a bool or None'): CrossAttention(32, 4, out_bias='yes')
    with pytest.raises(ValueError, match='bias must be a bool'): CrossAttention(32, 4, bias='no')
    with pytest.raises(ValueError, match='attn_bias must be one of'): DATConfig(attn_bias='q')
    with pytest.raises(ValueError, match='out_bias must be a bool or None'): DualAttention(32, 2, 2, out_bias='yes')


def test_vidat_front_end_as_the_official_vision_model():
    "LayerNorm -> Linear -> LayerNorm patch tokens, a CLS token with N(0, 1) positions for n + 1 tokens, pooling, norm + linear head."
    from relbook.dat import PatchEmbedding
    torch.manual_seed(0)
    cfg = DATConfig(d_model=64, n_layers=1, n_heads_sa=1, n_heads_ra=1, d_ff=64)
    vit = ViDAT(12, 4, 3, 5, cfg)
    assert isinstance(vit.embed, PatchEmbedding) and vit.pool == 'cls'
    assert [type(m) for m in (vit.embed.norm_in, vit.embed.proj, vit.embed.norm_out)] == [torch.nn.LayerNorm, torch.nn.Linear, torch.nn.LayerNorm]
    assert vit.encoder.cfg.max_len == 10 and vit.encoder.pos.weight.shape == (10, 64) and vit.encoder.symbols.library.shape == (10, 64)
    assert isinstance(vit.encoder.norm, torch.nn.Identity)                 # the norm comes after pooling, in the head
    assert isinstance(vit.head[0], torch.nn.LayerNorm) and isinstance(vit.head[1], torch.nn.Linear) and len(vit.head) == 2
    imgs = torch.rand(3, 3, 12, 12) * 0.01                                 # dim pixels: the LayerNorms rescale them
    tok = vit.embed(imgs)
    assert torch.allclose(tok.norm(dim=-1), torch.full((3, 9), 64 ** 0.5), rtol=0.02)
    ratio = float(tok.norm(dim=-1).mean() / vit.encoder.pos.weight.norm(dim=-1).mean())
    assert 0.8 < ratio < 1.25                                              # content and position on the same scale
    out = vit(imgs)
    with torch.no_grad(): vit.cls.add_(torch.randn_like(vit.cls))       # (a constant shift would vanish in the LayerNorms)
    assert not torch.allclose(out, vit(imgs)), "the CLS token must feed the head"
    # pool='mean' averages every token, CLS included; the reference path agrees with the fast one
    vm = ViDAT(12, 4, 3, 1, cfg, pool='mean').double()
    x = torch.rand(2, 3, 12, 12, dtype=torch.float64)
    assert vm(x).shape == (2,) and torch.allclose(vm(x), vm(x, impl='reference'), atol=1e-10)
    with pytest.raises(ValueError, match="pool must be one of"): ViDAT(12, 4, 3, 5, cfg, pool='max')
    with pytest.raises(ValueError, match='image_size=12 must be divisible by patch_size=5'): ViDAT(12, 5, 3, 5, cfg)
    with pytest.raises(ValueError, match='n_classes must be a positive int'): ViDAT(12, 4, 3, 0, cfg)


def test_official_shapes():
    m = DualAttention(128, 4, 4)
    assert m.head_dim == 16 and m.n_rel == 4 and m.rel_dim == 16 * 4 // 4
    assert tuple(m.w_r.shape) == (4, 16, 4)
    assert abs(m.rel_scale - 16 ** -0.5) < 1e-12
    assert m.sa_o.weight.shape == (64, 64) and m.ra_o.weight.shape == (64, 64)


@pytest.mark.parametrize('kw, msg', [(dict(d_model=30, n_heads_sa=4, n_heads_ra=4), 'divisible'),
                                     (dict(d_model=32, n_heads_sa=0, n_heads_ra=0), 'n_heads'),
                                     (dict(d_model=32, n_heads_sa=4, n_heads_ra=4, n_kv_heads=3), 'n_kv_heads'),
                                     (dict(d_model=32, n_heads_sa=2, n_heads_ra=2, head_type='x'), 'head_type'),
                                     (dict(d_model=27, n_heads_sa=1, n_heads_ra=2, rope=True), 'rope'),
                                     (dict(d_model=32, n_heads_sa=2, n_heads_ra=2, attn_dropout=1.0), r'attn_dropout must be a finite number in \[0, 1\)'),
                                     (dict(d_model=32, n_heads_sa=2, n_heads_ra=2, out_dropout=-0.1), 'out_dropout')])
def test_bad_configs(kw, msg):
    d, sa, ra = kw.pop('d_model'), kw.pop('n_heads_sa'), kw.pop('n_heads_ra')
    with pytest.raises(ValueError, match=msg):
        DualAttention(d, sa, ra, **kw)


def test_bad_inputs():
    m = DualAttention(32, 2, 2)
    x = torch.randn(2, 5, 32)
    with pytest.raises(ValueError, match='symbols'): m(x)
    with pytest.raises(ValueError, match='symbols'): m(x, torch.randn(2, 4, 32))
    with pytest.raises(ValueError, match='relative'): m(x, torch.randn(6, 32))
    with pytest.raises(ValueError, match='x must be'): m(torch.randn(2, 5, 16), torch.randn(2, 5, 16))
    with pytest.raises(ValueError, match='key_padding_mask'): m(x, torch.randn(2, 5, 32), key_padding_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match='impl'): m(x, torch.randn(2, 5, 32), impl='naive')
    for bad, msg in ((dict(symbol_type='relative'), 'symbol_type must be one of'), (dict(pos_enc='alibi'), 'pos_enc must be one of'),
                     (dict(norm_type='batchnorm'), 'norm_type must be one of'), (dict(activation='tanh'), 'activation must be one of'),
                     (dict(dropout=1.5), r'dropout must be a finite number in \[0, 1\)'), (dict(d_model=30), 'd_model=30 must be divisible')):
        with pytest.raises(ValueError, match=msg): DATConfig(**bad)


def test_masked_keys_do_not_leak():
    torch.manual_seed(0)
    m = DualAttention(32, 2, 2, symmetric_rels=True)
    x = torch.randn(2, 6, 32); s = PositionalSymbols(32, 6)(x)
    keep = torch.ones(2, 6, dtype=torch.bool); keep[:, 4:] = False
    x2 = x.clone(); x2[:, 4:] += 1.0
    assert torch.allclose(m(x, s, key_padding_mask=keep)[:, :4], m(x2, s, key_padding_mask=keep)[:, :4], atol=1e-6)
    # causal: the future does not change the past
    y1, y2 = m(x, s, causal=True), m(x2, s, causal=True)
    assert torch.allclose(y1[:, :4], y2[:, :4], atol=1e-6)


@pytest.mark.parametrize('symbol', SYMBOL_TYPES)
def test_kv_cache_exact(symbol):
    torch.manual_seed(0)
    cfg = DATConfig(d_model=32, n_layers=2, n_heads_sa=2, n_heads_ra=2, symbol_type=symbol, max_len=32, max_rel_pos=4,
                    n_symbols=8, sym_heads=2, pos_enc='rope', n_kv_heads=1)
    lm = DATLanguageModel(40, cfg).eval()
    idx = torch.randint(0, 40, (2, 10))
    caches = [dict() for _ in lm.stack.blocks]
    steps = torch.cat([lm(idx[:, :3], caches=caches)] + [lm(idx[:, t:t + 1], caches=caches) for t in range(3, 10)], 1)
    assert torch.allclose(lm(idx), steps, atol=1e-4)
    g1 = lm.generate(idx[:, :3], 6, temperature=0)
    g2 = lm.generate(idx[:, :3], 6, temperature=0, use_cache=False)
    assert torch.equal(g1, g2) and g1.shape == (2, 9)
    s1 = lm.generate(idx[:, :3], 5, temperature=1.0, top_k=5, generator=torch.Generator().manual_seed(1))
    s2 = lm.generate(idx[:, :3], 5, temperature=1.0, top_k=5, generator=torch.Generator().manual_seed(1))
    assert torch.equal(s1, s2)


def test_generate_errors():
    lm = DATLanguageModel(10, DATConfig(d_model=16, n_heads_sa=1, n_heads_ra=1, max_len=8))
    with pytest.raises(ValueError, match='max_len'): lm.generate(torch.zeros(1, 4, dtype=torch.long), 8)
    with pytest.raises(ValueError, match='temperature'): lm.generate(torch.zeros(1, 2, dtype=torch.long), 2, temperature=-1)
    with pytest.raises(ValueError, match='token ids'): lm(torch.tensor([[1, 10]]))


@pytest.mark.parametrize('head_type', ['ra', 'rca'])
def test_models_train_a_step(head_type):
    torch.manual_seed(0)
    enc = DATConfig(d_model=32, n_layers=2, n_heads_sa=2, n_heads_ra=2, head_type=head_type, activation='relu',
                    norm_first=False, pos_enc='sinusoidal', norm_type='rmsnorm')
    s2s = DATSeq2Seq(20, 20, enc, replace(enc, n_heads_sa=2, n_heads_ra=2))
    src, tgt = torch.randint(1, 20, (4, 9)), torch.randint(1, 20, (4, 6)); src[0, 6:] = 0
    for model, task, batch in [(s2s, Seq2Seq(pad_id=0), (src, tgt)),
                               (ViDAT(8, 2, 1, 10, replace(enc, symbol_type='position_relative', symmetric_rels=True)),
                                Classification(), (torch.rand(4, 1, 8, 8), torch.randint(0, 10, (4,)))),
                               (ViDAT(8, 4, 3, 1, replace(enc, symbol_type='symbolic', n_symbols=4, sym_heads=2)),
                                Classification(), (torch.rand(4, 3, 8, 8), torch.randint(0, 2, (4,))))]:
        before = [p.detach().clone() for p in model.parameters()]
        opt = torch.optim.Adam(model.parameters(), 1e-3)
        loss = task.loss(model, batch); loss.backward(); opt.step()
        assert torch.isfinite(loss)
        assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    lm = DATLanguageModel(30, replace(enc, symbol_type='symbolic', n_symbols=8, sym_heads=2, pos_enc='rope'))
    idx = torch.randint(0, 30, (3, 12))
    loss = torch.nn.functional.cross_entropy(lm(idx[:, :-1]).transpose(1, 2), idx[:, 1:]); loss.backward()
    assert torch.isfinite(loss)


def test_seq2seq_generate_matches_teacher_forcing():
    torch.manual_seed(0)
    enc = DATConfig(d_model=32, n_layers=2, n_heads_sa=2, n_heads_ra=2)
    m = DATSeq2Seq(20, 20, enc, enc).eval()
    src, start = torch.randint(1, 20, (3, 7)), torch.ones(3, 1, dtype=torch.long)
    gen = m.generate(src, 5, start)
    tf = start
    for _ in range(5): tf = torch.cat([tf, m(src, tf)[:, -1:].argmax(-1)], 1)
    assert torch.equal(gen, tf[:, 1:])


def test_transformer_is_the_zero_relational_head_case():
    cfg = DATConfig(d_model=32, n_heads_sa=4, n_heads_ra=0)
    stack = DATStack(cfg)
    assert stack.symbols is None
    assert stack(torch.randn(2, 5, 32)).shape == (2, 5, 32)


def test_theorem1():
    lo, hi = theorem1_check(1.0, n_samples=500), theorem1_check(100.0, n_samples=500)
    assert lo['bound_holds'] and hi['bound_holds']
    assert hi['max_err_margin'] < 1e-9 < lo['max_err_margin']
    assert hi['symbol_w_margin'] > 1 - 1e-9


@pytest.mark.parametrize('beta', [3.0, 10.0, 30.0])
def test_theorem1_symbols_carry_the_selection(beta):
    "The retrieved symbol weights are softmax(β·u), so on the margin event the selected object's weight is ≥ 1 − (n−1)e^(−βη)."
    r = theorem1_check(beta, n_samples=500)
    assert r['symbol_err'] < 1e-12
    assert r['symbol_w_margin'] >= r['symbol_w_bound'] - 1e-12 and r['symbol_w_margin'] > 0


def test_theorem1_symbol_check_can_fail(monkeypatch):
    "A selection logit at half the scale (a wrong construction) breaks the symbol checks: they test something."
    import relbook.dat as dat
    orig = dat.theorem1_module
    def halved(*a):
        ra, sym = orig(*a)
        with torch.no_grad(): ra.ra_q.weight.mul_(0.5)
        return ra, sym
    monkeypatch.setattr(dat, 'theorem1_module', halved)
    r = theorem1_check(10.0, n_samples=500)
    assert r['symbol_err'] > 1e-3 and r['symbol_w_margin'] < r['symbol_w_bound']


@pytest.mark.parametrize('beta', [float('nan'), float('inf'), 0.0, -1.0, True, '10'])
def test_theorem1_refuses_bad_beta(beta):
    with pytest.raises(ValueError, match='beta must be a positive finite number'):
        theorem1_check(beta, n_samples=10)


def test_bench_once_runs():
    r = bench_once('fast', 32, d_model=32, n_heads=2, repeats=1)
    assert r['time_ms'] > 0 and set(r) == {'time_ms', 'peak_mib'}
    with pytest.raises(ValueError, match='impl'): bench_once('slow', 8)
    for impl in ('fast', 'fast (no checkpoint)', 'dat', 'sdpa', 'reference', 'factorised'):
        r = bench_once(impl, 48, d_model=32, n_heads=2, repeats=1, mode='train')
        assert r['time_ms'] > 0
    with pytest.raises(ValueError, match='mode'): bench_once('fast', 8, mode='backward')
    with pytest.raises(ValueError, match='bf16'): bench_once('fast', 8, dtype='bf16')          # CPU: no bf16 benchmark


def test_checkpointed_blocks_give_the_same_gradients_and_save_memory(monkeypatch):
    import relbook.dat as dat
    monkeypatch.setattr(dat, 'BLOCK_PAIRS', 64)          # 64 keys -> 8 queries a block, 8 blocks
    torch.manual_seed(0)
    m = DualAttention(32, 1, 3, symmetric_rels=True)
    x = torch.randn(2, 64, 32); sym = SymbolicAttention(32, 6, 2)(x).detach()
    saved = {}
    def run(ckpt):
        m.checkpoint_blocks = ckpt; m.zero_grad(); xx = x.clone().requires_grad_()
        n_saved = [0]
        def pack(t): n_saved[0] += t.numel(); return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            y = m(xx, sym, causal=True)
        y.square().sum().backward(); saved[ckpt] = n_saved[0]
        return [xx.grad] + [p.grad.clone() for p in m.parameters()]
    for a, b in zip(run(True), run(False)): assert torch.allclose(a, b, atol=1e-6, rtol=1e-5)
    assert saved[False] - saved[True] >= 2 * 64 * 64 * (3 + 3)   # every block's α (b·h·n·n) and r (b·d_r·n·n) are not kept


def test_rca_heads_equal_the_abstractors_rca():
    from relbook.abstractor import RelationalCrossAttention
    torch.manual_seed(0)
    d, h, n = 32, 4, 6
    dat_rca = DualAttention(d, 0, h, head_type='rca', bias=False).double()
    abs_rca = RelationalCrossAttention(d, d, h, d_k=d // h).double()
    with torch.no_grad():
        abs_rca.w_q.weight.copy_(dat_rca.ra_q.weight); abs_rca.w_k.weight.copy_(dat_rca.ra_k.weight)
        abs_rca.w_v.weight.copy_(dat_rca.ra_s.weight); abs_rca.w_o.weight.copy_(dat_rca.ra_o.weight); abs_rca.w_o.bias.zero_()
    x, s = torch.randn(2, n, d, dtype=torch.float64), torch.randn(2, n, d, dtype=torch.float64)
    keep = torch.ones(2, n, dtype=torch.bool); keep[1, 4:] = False
    for causal in (False, True):
        a = dat_rca(x, s, key_padding_mask=keep, causal=causal)
        b = abs_rca(x, s, key_padding_mask=keep, causal=causal)
        assert (a - b).abs().max() < 1e-12


def test_bench_subprocess_measures_in_fresh_processes():
    from relbook.dat import bench_subprocess
    r = bench_subprocess('fast', 16, threads=1, d_model=16, n_heads=2, repeats=1)
    assert r['time_ms'] > 0 and r['peak_mib'] >= 0


def test_initialisations_as_the_official_code():
    "w_r: kaiming_uniform(a=√5) of fan-in d_h·d_r (U(±1/√(d_h·d_r))); the relative library: Xavier-uniform (official)."
    torch.manual_seed(0)
    attn = DualAttention(128, n_heads_sa=0, n_heads_ra=2, n_relations=2)          # relational games: d_h = 64, d_r = 2
    bound = (64 * 2) ** -0.5
    assert attn.w_r.abs().max() <= bound and attn.w_r.abs().max() > 0.9 * bound
    lib = PositionRelativeSymbols(128, 161).library                              # (323, 128)
    xb = (6 / (323 + 128)) ** 0.5
    assert lib.abs().max() <= xb and lib.abs().max() > 0.9 * xb


def test_symbol_values_are_grouped_like_the_keys():
    """With n_kv_heads = g the symbol projection W_s has g·d_h outputs, each serving n_h/g query heads, as the keys (official
    `repeat_kv`): the grouped layer equals the ungrouped one whose key, value and symbol maps repeat the grouped rows head by head."""
    torch.manual_seed(0)
    for sym in (torch.randn(2, 6, 48), torch.randn(2 * 3 + 1, 48)):          # per-position symbols; a relative library
        g = DualAttention(48, n_heads_sa=2, n_heads_ra=4, n_kv_heads=2)
        u = DualAttention(48, n_heads_sa=2, n_heads_ra=4)
        hd = g.head_dim
        assert g.ra_s.out_features == 2 * hd and u.ra_s.out_features == 4 * hd
        state = {}
        for k, v in g.state_dict().items():
            h = u.state_dict()[k].shape[0] // hd if k.endswith(('weight', 'bias')) and u.state_dict()[k].shape != v.shape else None
            state[k] = v if h is None else v.view(v.shape[0] // hd, hd, *v.shape[1:]).repeat_interleave(h // (v.shape[0] // hd), 0).reshape(h * hd, *v.shape[1:])
        u.load_state_dict(state)
        x = torch.randn(2, 6, 48)
        for impl in ('fast', 'reference'):
            torch.testing.assert_close(g(x, sym, impl=impl), u(x, sym, impl=impl), atol=1e-5, rtol=1e-5)


def test_lm_positional_symbols_get_the_gpt2_init():
    "The official LM re-initialises every nn.Embedding (the positional-symbol library is one) N(0, 0.02)."
    torch.manual_seed(0)
    cfg = DATConfig(d_model=64, n_layers=1, n_heads_sa=2, n_heads_ra=2, symbol_type='positional', max_len=512, pos_enc='rope')
    lm = DATLanguageModel(100, cfg)
    assert abs(lm.stack.symbols.library.std().item() - 0.02) < 0.002


def _train_out(m, x, s, seed, impl='fast'):
    torch.manual_seed(seed)
    return m(x, s, impl=impl)


def test_official_dropout_placement_sites_and_eval_equivalence():
    """dropout_placement='official' (encoder blocks): attention probabilities and each head type's output dropped, no MLP hidden
    dropout, one more dropout after norm1 in a post-norm block; 'ours' unchanged. In eval mode the two placements compute the
    same function of the same weights; in training they differ."""
    cfg = DATConfig(d_model=32, n_layers=2, n_heads_sa=1, n_heads_ra=1, d_ff=64, dropout=0.1, max_len=9)
    ours, off = (ViDAT(36, 12, 3, 1, replace(cfg, dropout_placement=p), pool='mean') for p in ('ours', 'official'))
    off.load_state_dict(ours.state_dict())                          # no parameter differs between the placements
    for blk in ours.encoder.blocks:
        assert blk.mlp.drop.p == 0.1 and blk.attn.attn_dropout == 0 and blk.attn.out_dropout == 0
        assert isinstance(blk.drop_mid, torch.nn.Identity)
    for blk in off.encoder.blocks:
        assert blk.mlp.drop.p == 0 and blk.attn.attn_dropout == 0.1 and blk.attn.out_dropout == 0.1 and blk.drop.p == 0.1
    post = DATStack(replace(cfg, norm_first=False, dropout_placement='official'))
    assert all(isinstance(b.drop_mid, torch.nn.Dropout) and b.drop_mid.p == 0.1 for b in post.blocks)
    x = torch.rand(4, 3, 36, 36)
    ours.eval(); off.eval()
    assert torch.equal(ours(x), off(x))
    ours.train(); off.train()
    torch.manual_seed(1); a = ours(x)
    torch.manual_seed(1); b = off(x)
    assert not torch.allclose(a, b)
    with pytest.raises(ValueError, match='dropout_placement must be one of'):
        DATConfig(dropout_placement='keras')
    with pytest.raises(ValueError, match="implemented for encoder blocks only"):
        DATSeq2Seq(10, 10, cfg, replace(cfg, dropout_placement='official'))


@pytest.mark.parametrize('symbol', ['positional', 'position_relative'])
def test_attention_dropout_one_mask_for_both_terms_fast_equals_reference(symbol):
    """With attention-probability dropout in training, the fast (blocked) relational path and the paper-literal reference draw
    the same mask for α (same random state) and use it for the relation and the symbol term alike: their outputs agree."""
    d, b, n = 16, 2, 6
    torch.manual_seed(0)
    m = DualAttention(d, 0, 2, attn_dropout=0.3).double().train()
    x = torch.randn(b, n, d, dtype=torch.float64)
    s = _symbols(symbol, d, n, x)
    fast, ref = _train_out(m, x, s, 5), _train_out(m, x, s, 5, 'reference')
    assert torch.allclose(fast, ref, atol=1e-10), (fast - ref).abs().max()
    assert not torch.allclose(fast, _train_out(m, x, s, 6))          # another seed, another mask
    m.eval()
    assert torch.allclose(m(x, s), m(x, s, impl='reference'), atol=1e-10)
    with pytest.raises(ValueError, match="impl='factorised' cannot drop"):
        _train_out(m.train(), x, _symbols('positional', d, n, x), 0, 'factorised')


@pytest.mark.parametrize('heads', [(2, 0), (0, 2), (1, 1)])
def test_attention_dropout_is_unbiased(heads):
    "Inverted dropout on the probabilities (SDPA's for sensory heads, ours for relational ones): the mean over draws is the eval output."
    d, b, n = 16, 2, 5
    torch.manual_seed(0)
    m = DualAttention(d, *heads, attn_dropout=0.2).double()
    x = torch.randn(b, n, d, dtype=torch.float64)
    s = _symbols('positional', d, n, x)
    with torch.no_grad():
        want = m.eval()(x, s)
        m.train()
        mean = torch.stack([m(x, s) for _ in range(4000)]).mean(0)
    assert (mean - want).abs().max() < 0.05 * want.abs().max(), ((mean - want).abs().max(), want.abs().max())


def test_checkpointed_blocks_redraw_the_same_dropout_masks(monkeypatch):
    "With attention dropout, a checkpointed block recomputed in backward draws the forward's mask again: the gradients match."
    import relbook.dat as dat
    monkeypatch.setattr(dat, 'BLOCK_PAIRS', 64)          # 64 keys -> 8 queries a block, 8 blocks
    torch.manual_seed(0)
    m = DualAttention(32, 1, 3, symmetric_rels=True, attn_dropout=0.3).train()
    x = torch.randn(2, 64, 32); sym = SymbolicAttention(32, 6, 2)(x).detach()
    def run(ckpt):
        m.checkpoint_blocks = ckpt; m.zero_grad(); xx = x.clone().requires_grad_()
        torch.manual_seed(7)
        y = m(xx, sym, causal=True)
        y.square().sum().backward()
        return [y.detach(), xx.grad] + [p.grad.clone() for p in m.parameters()]
    for a, b in zip(run(True), run(False)): assert torch.allclose(a, b, atol=1e-6, rtol=1e-5)
