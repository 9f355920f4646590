"""Bad-input probe of relbook's public modules (issue 20): every probe feeds one bad (or edge-case) input and
classifies what came back.

Outcomes
  clear     ValueError/TypeError whose message names the argument (or SystemExit with the name, for the CLI)
  ok        a valid edge case (n = 0, n = 1, fully masked row, float16) ran and gave finite numbers, or NaN in gave NaN out
  obscure   any other exception, or a clear type whose message does not name the argument
  silent    a bad argument was accepted
  nan_finite  NaN/inf in, all-finite out
  valid_failed  a valid edge case raised or gave non-finite numbers

Run: `python tests/probe_bad_inputs.py` (add `--verbose` for every probe). Against a pristine tree:
`PYTHONPATH=/path/to/worktree python tests/probe_bad_inputs.py`. tests/test_bad_inputs.py pins the outcomes.
"""
from __future__ import annotations
import os, subprocess, sys
from collections import Counter
from dataclasses import dataclass
from typing import Callable
import torch

os.environ.setdefault('RELBOOK_PROFILE', 'smoke')
nan, inf = float('nan'), float('inf')


@dataclass
class Probe:
    module: str                 # relbook module under test
    name: str                   # what is probed
    kind: str                   # 'bad' (expect a clear error), 'nan' (NaN/inf in), 'valid' (edge case that must work)
    fn: Callable                # runs the probe; returns the output (tensor, tuple or anything)
    arg: tuple = ()             # names, one of which a clear error message must contain (kind 'bad'/'nan')


PROBES: list[Probe] = []

def probe(module, name, kind, arg=()):
    "Decorator: register `fn` as a probe."
    def deco(fn):
        PROBES.append(Probe(module, name, kind, fn, (arg,) if isinstance(arg, str) else tuple(arg)))
        return fn
    return deco

def add(module, name, kind, fn, arg=()):
    PROBES.append(Probe(module, name, kind, fn, (arg,) if isinstance(arg, str) else tuple(arg)))

def _tensors(out):
    if isinstance(out, torch.Tensor): return [out]
    if isinstance(out, (tuple, list)): return [t for o in out for t in _tensors(o)]
    return []

def classify(p: Probe) -> tuple[str, str]:
    "(outcome, detail) of one probe."
    torch.manual_seed(0)
    try:
        out = p.fn()
    except (ValueError, TypeError, SystemExit) as e:
        msg = str(e)
        named = any(a.lower() in msg.lower() for a in p.arg)
        if p.kind == 'valid': return 'valid_failed', f'{type(e).__name__}: {msg[:120]}'
        return ('clear' if named else 'obscure'), f'{type(e).__name__}: {msg[:120]}'
    except Exception as e:                                    # noqa: BLE001 - any other error is obscure
        return ('valid_failed' if p.kind == 'valid' else 'obscure'), f'{type(e).__name__}: {str(e)[:120]}'
    ts = [t for t in _tensors(out) if t.is_floating_point()]
    finite = all(bool(torch.isfinite(t).all()) for t in ts)
    if p.kind == 'bad': return 'silent', 'accepted'
    if p.kind == 'nan': return ('ok', 'non-finite out') if not finite else ('nan_finite', 'finite out')
    if isinstance(out, str) and out.startswith('FAIL'): return 'valid_failed', out
    return ('ok', 'ran') if finite else ('valid_failed', 'non-finite output')


# --- helpers -------------------------------------------------------------------------------------
def with_nan(x, val=nan):
    x = x.clone(); x.view(-1)[0] = val; return x

def tensor_probes(module: str, cls: str, call: Callable, make_x: Callable, *, arg='x', shape_bad=True, nan_ok=True,
                  edge_n=True, ints=True):
    "The standard probe set for a tensor-taking callable `call(x)`, with `make_x(n)` a valid input of n items/objects."
    if shape_bad:
        add(module, f'{cls}: {arg} wrong last dim', 'bad', lambda: call(torch.cat([make_x(3), make_x(3)[..., :1]], -1)), arg)
        add(module, f'{cls}: {arg} missing batch dim', 'bad', lambda: call(make_x(3)[0]), arg)
    add(module, f'{cls}: {arg} float64', 'bad', lambda: call(make_x(3).double()), arg)
    if ints:
        add(module, f'{cls}: {arg} int64', 'bad', lambda: call(make_x(3).long()), arg)
        add(module, f'{cls}: {arg} uint8', 'bad', lambda: call(make_x(3).abs().to(torch.uint8)), arg)
    if nan_ok:
        add(module, f'{cls}: NaN in {arg}', 'nan', lambda: call(with_nan(make_x(3))), arg)
        add(module, f'{cls}: inf in {arg}', 'nan', lambda: call(with_nan(make_x(3), inf)), arg)
    if edge_n:
        add(module, f'{cls}: n = 0', 'valid', lambda: call(make_x(0)))
        add(module, f'{cls}: n = 1', 'valid', lambda: call(make_x(1)))


def half_run(make, call, scale, dtype, b=2, n=5, d=16):
    "Forward + backward of a module cast to `dtype` on inputs × `scale`: the output and every gradient (float32 copies)."
    torch.manual_seed(0)
    m = make().to(dtype)
    x = (torch.randn(b, n, d) * scale).to(dtype).requires_grad_()
    y = call(m, x); y.float().sum().backward()
    return (y.float(), x.grad.float(), *(p.grad.float() for p in m.parameters() if p.grad is not None))

def half_probes(module, cls, make, call, scales=(10,), d=16):
    "Low-precision probes: float16 and bfloat16 at each scale must give finite outputs and gradients."
    for dt in (torch.float16, torch.bfloat16):
        for sc in scales:
            add(module, f'{cls} {str(dt)[6:]} x{sc}: finite out and grads', 'valid', lambda dt=dt, sc=sc: half_run(make, call, sc, dt, d=d))


# --- core ----------------------------------------------------------------------------------------
def _core():
    from relbook import core
    add('core', 'check_positive(NaN)', 'bad', lambda: core.check_positive(nan, 'logit_scale', integer=False), 'logit_scale')
    add('core', 'check_positive(inf, finite=True)', 'bad', lambda: core.check_positive(inf, 'lr', integer=False, finite=True), 'lr')
    add('core', 'check_positive(True)', 'bad', lambda: core.check_positive(True, 'n'), 'n')
    add('core', 'seed_everything(True)', 'bad', lambda: core.seed_everything(True), 'seed')
    add('core', 'seed_everything(-1)', 'bad', lambda: core.seed_everything(-1), 'seed')
    add('core', 'seed_everything(1.5)', 'bad', lambda: core.seed_everything(1.5), 'seed')
    add('core', 'check_seed(True)', 'bad', lambda: core.check_seed(True), 'seed')
    add('core', 'check_shape(list)', 'bad', lambda: core.check_shape([1, 2], 'x', (None,)), 'x')
    add('core', 'check_choice(bad)', 'bad', lambda: core.check_choice('z', 'kind', ('a', 'b')), 'kind')
    add('core', 'by_profile(bad profile)', 'bad', lambda: core.by_profile(1, 2, 3, profile='huge'), 'profile')
    add('core', 'get_device(bad)', 'bad', lambda: core.get_device('tpu9'), 'device')


# --- relations -----------------------------------------------------------------------------------
def _relations():
    from relbook.relations import MultiHeadRelation, CoRelNet, PairRelationClassifier, relation_activation, mlp
    rel = MultiHeadRelation(8, 2, 4, activation='softmax')
    mk = lambda n: torch.randn(2, n, 8)
    tensor_probes('relations', 'MultiHeadRelation', rel, mk)
    add('relations', 'MultiHeadRelation: y float64', 'bad', lambda: rel(mk(3), mk(3).double()), 'y')
    add('relations', 'MultiHeadRelation: mask wrong shape', 'bad', lambda: rel(mk(3), mask=torch.ones(2, 4, dtype=torch.bool)), 'mask')
    add('relations', 'MultiHeadRelation: fully masked y_mask row', 'valid',
        lambda: rel(mk(3), mk(3), y_mask=torch.tensor([[False] * 3, [True] * 3])))
    add('relations', 'MultiHeadRelation: NaN in x, masked y', 'nan',
        lambda: rel(with_nan(mk(3)), mk(3), y_mask=torch.tensor([[True, False, True]] * 2)), 'x')
    add('relations', 'relation_activation softmax NaN', 'nan', lambda: relation_activation(with_nan(torch.randn(1, 2, 3, 1)), 'softmax'), 'R')
    add('relations', 'relation_activation bad name', 'bad', lambda: relation_activation(torch.randn(1, 2, 2, 1), 'gelu'), 'activation')
    for k, a in dict(d_in=(0, 2, 4), d_r=(8, 0, 4), d_p=(8, 2, 0)).items():
        add('relations', f'MultiHeadRelation({k}=0)', 'bad', lambda a=a: MultiHeadRelation(*a), k)
    add('relations', 'MultiHeadRelation(d_r=1.5)', 'bad', lambda: MultiHeadRelation(8, 1.5, 4), 'd_r')
    add('relations', 'MultiHeadRelation(activation=bad)', 'bad', lambda: MultiHeadRelation(8, 2, 4, activation='elu'), 'activation')
    crn = CoRelNet(8, 4, 2)
    add('relations', 'CoRelNet: x wrong m', 'bad', lambda: crn(torch.randn(2, 5, 8)), 'x')
    add('relations', 'CoRelNet: x float64', 'bad', lambda: crn(torch.randn(2, 4, 8).double()), 'x')
    add('relations', 'CoRelNet: x int64', 'bad', lambda: crn(torch.randn(2, 4, 8).long()), 'x')
    add('relations', 'CoRelNet: NaN in x', 'nan', lambda: crn(with_nan(torch.randn(2, 4, 8))), 'x')
    add('relations', 'CoRelNet(m=0)', 'bad', lambda: CoRelNet(8, 0, 2), 'm')
    prc = PairRelationClassifier(MultiHeadRelation(8, 2, 4))
    add('relations', 'PairRelationClassifier: 3 objects', 'bad', lambda: prc(torch.randn(2, 3, 8)), 'pair')
    add('relations', 'PairRelationClassifier: float64', 'bad', lambda: prc(torch.randn(2, 2, 8).double()), ('pair', 'x'))
    half_probes('relations', 'MultiHeadRelation(softmax)', lambda: MultiHeadRelation(16, 2, 8, activation='softmax'), lambda m, x: m(x), (10, 100))
    add('relations', 'mlp(d_hidden=0)', 'bad', lambda: mlp(4, 0, 2), 'd_hidden')
    add('relations', 'mlp(depth=-1)', 'bad', lambda: mlp(4, 4, 2, depth=-1), 'depth')


# --- abstractor ----------------------------------------------------------------------------------
def _abstractor():
    from relbook.abstractor import (RelationalCrossAttention, MultiHeadAttention, Abstractor, AbstractorConfig,
                                    AbstractorClassifier, Seq2SeqConfig, make_seq2seq, rca_kernel)
    rca = RelationalCrossAttention(8, 16, 2)
    sym = torch.randn(8, 16)
    mk = lambda n: torch.randn(2, n, 8)
    tensor_probes('abstractor', 'RelationalCrossAttention', lambda x: rca(x, sym[:x.shape[1]] if x.dim() == 3 else sym[:3]), mk)
    for sr in ('sigmoid', 'tanh'):
        r2 = RelationalCrossAttention(8, 16, 2, sigma_rel=sr)
        add('abstractor', f'RCA({sr}): NaN in x', 'nan', lambda r2=r2: r2(with_nan(mk(3)), sym[:3]), 'x')
    add('abstractor', 'RCA: NaN in x, return_relations', 'nan', lambda: rca(with_nan(mk(3)), sym[:3], return_relations=True), 'x')
    add('abstractor', 'RCA: NaN in x, masked, return_relations', 'nan',
        lambda: rca(with_nan(mk(3)), sym[:3], key_padding_mask=torch.tensor([[True, True, False]] * 2), return_relations=True), 'x')
    add('abstractor', 'RCA: symbols float64', 'bad', lambda: rca(mk(3), sym[:3].double()), 'symbols')
    add('abstractor', 'RCA: key_padding_mask wrong batch', 'bad', lambda: rca(mk(3), sym[:3], key_padding_mask=torch.ones(3, 3, dtype=torch.bool)), 'key_padding_mask')
    add('abstractor', 'RCA: fully masked row', 'valid', lambda: rca(mk(3), sym[:3], key_padding_mask=torch.tensor([[False] * 3, [True] * 3])))
    add('abstractor', 'RCA: fully masked row, return_relations', 'valid',
        lambda: rca(mk(3), sym[:3], key_padding_mask=torch.tensor([[False] * 3, [True] * 3]), return_relations=True))
    add('abstractor', 'RCA(diag_mask): n = 1', 'valid', lambda: RelationalCrossAttention(8, 16, 2, diag_mask=True)(mk(1), sym[:1]))
    add('abstractor', 'RCA(d_k=0)', 'bad', lambda: RelationalCrossAttention(8, 16, 2, d_k=0), 'd_k')
    add('abstractor', 'RCA(d_v=0)', 'bad', lambda: RelationalCrossAttention(8, 16, 2, d_v=0), 'd_v')
    add('abstractor', 'RCA(sigma_rel=bad)', 'bad', lambda: RelationalCrossAttention(8, 16, 2, sigma_rel='relu'), 'sigma_rel')
    add('abstractor', 'RCA(scale=NaN)', 'bad', lambda: RelationalCrossAttention(8, 16, 2, scale=nan), 'scale')
    mha = MultiHeadAttention(16, 2)
    mk16 = lambda n: torch.randn(2, n, 16)
    tensor_probes('abstractor', 'MultiHeadAttention', mha, mk16)
    add('abstractor', 'MultiHeadAttention: context wrong dim', 'bad', lambda: mha(mk16(3), torch.randn(2, 3, 8)), 'context')
    add('abstractor', 'MultiHeadAttention: context wrong batch', 'bad', lambda: mha(mk16(3), torch.randn(3, 3, 16)), 'context')
    add('abstractor', 'MultiHeadAttention: key_padding_mask wrong shape', 'bad',
        lambda: mha(mk16(3), key_padding_mask=torch.ones(2, 4, dtype=torch.bool)), 'key_padding_mask')
    add('abstractor', 'MultiHeadAttention: fully masked row', 'valid', lambda: mha(mk16(3), key_padding_mask=torch.tensor([[False] * 3, [True] * 3])))
    half_probes('abstractor', 'RelationalCrossAttention', lambda: RelationalCrossAttention(16, 16, 2), lambda m, x: m(x, torch.randn(5, 16, dtype=x.dtype)), (10, 100))
    half_probes('abstractor', 'MultiHeadAttention', lambda: MultiHeadAttention(16, 2), lambda m, x: m(x), (10, 100))
    add('abstractor', 'MultiHeadAttention(d_k=0)', 'bad', lambda: MultiHeadAttention(16, 2, d_k=0), 'd_k')
    add('abstractor', 'MultiHeadAttention(d_v=0)', 'bad', lambda: MultiHeadAttention(16, 2, d_v=0), 'd_v')
    cfg = AbstractorConfig(d_model=16, n_heads=2, d_ff=16, max_len=8)
    ab = Abstractor(8, cfg)
    tensor_probes('abstractor', 'Abstractor', ab, mk)
    add('abstractor', 'Abstractor: fully masked row', 'valid', lambda: ab(mk(3), key_padding_mask=torch.tensor([[False] * 3, [True] * 3])))
    add('abstractor', 'Abstractor: n > max_len', 'bad', lambda: ab(torch.randn(1, 9, 8)), ('max_len', 'n'))
    for k, v in dict(d_k=0, d_v=0, n_heads=0, d_ff=0, n_layers=0, max_len=0, dropout=1.5, sigma_rel='relu', symbols='fixed').items():
        add('abstractor', f'AbstractorConfig({k}={v!r})', 'bad', lambda k=k, v=v: AbstractorConfig(**{k: v}), k)
    add('abstractor', 'AbstractorConfig(dropout=NaN)', 'bad', lambda: AbstractorConfig(dropout=nan), 'dropout')
    clf = AbstractorClassifier(8, 4, 3, cfg)
    add('abstractor', 'AbstractorClassifier: wrong m', 'bad', lambda: clf(torch.randn(2, 5, 8)), 'x')
    add('abstractor', 'AbstractorClassifier: float64', 'bad', lambda: clf(torch.randn(2, 4, 8).double()), 'x')
    add('abstractor', 'AbstractorClassifier: NaN', 'nan', lambda: clf(with_nan(torch.randn(2, 4, 8))), 'x')
    s2s = make_seq2seq(Seq2SeqConfig(arch='b', src_vocab=10, tgt_vocab=11, d_model=16, n_heads=2, d_ff=16, n_enc_layers=1,
                                     n_dec_layers=1, src_pad_id=0, abstractor=cfg))
    src, tgt = torch.randint(1, 10, (2, 5)), torch.randint(0, 11, (2, 4))
    add('abstractor', 'EncoderDecoder: src id out of range', 'bad', lambda: s2s(src + 10, tgt), 'src')
    add('abstractor', 'EncoderDecoder: tgt id out of range', 'bad', lambda: s2s(src, tgt + 11), 'tgt')
    add('abstractor', 'EncoderDecoder: negative tgt id', 'bad', lambda: s2s(src, tgt - 12), 'tgt')
    add('abstractor', 'EncoderDecoder: float src', 'bad', lambda: s2s(src.float(), tgt), 'src')
    add('abstractor', 'EncoderDecoder: tgt length 1', 'valid', lambda: s2s(src, tgt[:, :1]))
    add('abstractor', 'EncoderDecoder.generate(n_steps=0)', 'bad', lambda: s2s.generate(src, 0, tgt[:, :1]), 'n_steps')
    add('abstractor', 'EncoderDecoder.generate: 1-D start', 'bad', lambda: s2s.generate(src, 3, tgt[:, 0]), 'start')
    add('abstractor', 'EncoderDecoder.generate: n_steps=2', 'valid', lambda: s2s.generate(src, 2, tgt[:, :1]).float())
    add('abstractor', 'rca_kernel: bad sigma_rel', 'bad', lambda: rca_kernel(*(torch.randn(1, 1, 2, 4),) * 3, sigma_rel='elu'), 'sigma_rel')
    # review of chapters 3-4: lengths that went negative reached torch.arange (a bare RuntimeError) or a slice (a silent answer)
    from relbook.abstractor import sinusoidal, allowed_pairs, LearnedSymbols, SinusoidalSymbols, PositionRelativeSymbols
    add('abstractor', 'sinusoidal(n=-1)', 'bad', lambda: sinusoidal(-1, 8), 'n')
    add('abstractor', 'sinusoidal(d=0)', 'bad', lambda: sinusoidal(3, 0), 'd')
    add('abstractor', 'sinusoidal(n=0)', 'valid', lambda: sinusoidal(0, 8))
    add('abstractor', 'allowed_pairs(n_q=-1)', 'bad', lambda: allowed_pairs(-1, 3, causal=True), 'n_q')
    add('abstractor', 'allowed_pairs(n_k=-1), no mask', 'bad', lambda: allowed_pairs(3, -1), 'n_k')
    add('abstractor', 'allowed_pairs(n_q=True)', 'bad', lambda: allowed_pairs(True, 3, causal=True), 'n_q')
    for nm, mk_sym in (('LearnedSymbols', lambda: LearnedSymbols(4, 8)), ('SinusoidalSymbols', lambda: SinusoidalSymbols(8)),
                       ('PositionRelativeSymbols', lambda: PositionRelativeSymbols(4, 8))):
        add('abstractor', f'{nm}(n=-2)', 'bad', lambda mk_sym=mk_sym: mk_sym()(-2), 'n')
        add('abstractor', f'{nm}(n=2.0)', 'bad', lambda mk_sym=mk_sym: mk_sym()(2.0), 'n')
        add('abstractor', f'{nm}(n=0)', 'valid', lambda mk_sym=mk_sym: mk_sym()(0))


# --- set_game (chapter 4) ------------------------------------------------------------------------
def _set_game():
    import pandas as pd
    from dataclasses import replace
    from relbook.abstractor import AbstractorClassifier
    from relbook.set_game import (is_set, set_bits, card_index, mean_acc, EmbedderConfig, split_triples, transplant_relation,
                                  pair_data, deck, set_model, SET_ABSTRACTOR, official_embedder, OfficialPairAbstractor,
                                  OfficialModularAbstractor, transplant_pair_relation, all_triples, set_payback,
                                  shift_removed_acc, order_averaged_margin)
    attrs = deck()[1]
    A = attrs[torch.tensor([[0, 40, 80], [0, 1, 2]])]                                  # (2, 3, 4) attribute triples
    def bad_value(v, dtype=None):
        "A copy of A with one attribute value replaced by v."
        a = A.to(dtype or (torch.float32 if isinstance(v, float) else A.dtype)).clone(); a[0, 2, 0] = v; return a
    for nm, fn in (('is_set', is_set), ('set_bits', set_bits)):
        for v in (nan, 5, -1, 0.5):
            add('set_game', f'{nm}: attribute {v}', 'bad', lambda fn=fn, v=v: fn(bad_value(v)), 'attrs')
        add('set_game', f'{nm}: bool attrs', 'bad', lambda fn=fn: fn(A > 0), 'attrs')
        add('set_game', f'{nm}: valid triples', 'valid', lambda fn=fn: fn(A).float())
    add('set_game', 'is_set: wrong shape', 'bad', lambda: is_set(A[:, :2]), 'attrs')
    add('set_game', 'card_index: attribute 3', 'bad', lambda: card_index(torch.tensor([[3, 3, 3, 3]])), 'attrs')
    add('set_game', 'card_index: attribute NaN', 'bad', lambda: card_index(torch.tensor([[nan, 0, 0, 0]])), 'attrs')
    add('set_game', 'card_index: 3 attributes', 'bad', lambda: card_index(torch.tensor([[0, 0, 0]])), 'attrs')
    add('set_game', 'card_index: the deck', 'valid', lambda: card_index(attrs).float())
    df = pd.DataFrame({'model': ['A'] * 3, 'n_train': [10] * 3, 'test_acc': [0.5, nan, 0.7]})
    add('set_game', 'mean_acc: a NaN accuracy', 'nan', lambda: torch.tensor(mean_acc(df, 'A', 10)), 'test_acc')
    add('set_game', 'mean_acc: unknown model', 'bad', lambda: mean_acc(df, 'B', 10), 'model')
    for k, v in (('lr', nan), ('lr', -1.0), ('lr', 0.0), ('lr', inf), ('shift', nan), ('zoom', -0.1), ('jitter', inf), ('noise', nan)):
        add('set_game', f'EmbedderConfig({k}={v})', 'bad', lambda k=k, v=v: EmbedderConfig(**{k: v}), k)
    for f in ({'train': 1.2, 'val': -0.2, 'test': 0.0}, {'train': nan, 'val': 0.5, 'test': 0.5}, {}, {'train': True, 'test': 0.0}):
        add('set_game', f'split_triples(fractions={f})', 'bad', lambda f=f: split_triples(0, f), 'fractions')
    one, four = AbstractorClassifier(64, 2, 2, replace(SET_ABSTRACTOR, n_heads=1)), set_model('Abstractor')
    for h in (True, 1.0, -1, 4):
        add('set_game', f'transplant_relation(head={h!r})', 'bad', lambda h=h: transplant_relation(one, four, h), 'head')
    emb = official_embedder(0)
    add('set_game', 'transplant_pair_relation(head=True)', 'bad',
        lambda: transplant_pair_relation(OfficialPairAbstractor(emb), OfficialModularAbstractor(emb), True), 'head')
    add('set_game', 'pair_data: NaN attributes', 'bad', lambda: pair_data(torch.full((81, 4), nan), 0, 10), 'attrs')
    add('set_game', 'pair_data: attributes (81, 3)', 'bad', lambda: pair_data(attrs[:, :3], 0, 10), 'attrs')
    add('set_game', 'pair_data(attribute=True)', 'bad', lambda: pair_data(attrs, True, 10), 'attribute')
    add('set_game', 'pair_data: valid', 'valid', lambda: pair_data(attrs, 0, 10)[1].float())
    T = all_triples()
    add('set_game', 'set_payback: NaN margin', 'nan', lambda: torch.tensor(list(set_payback(torch.full((len(T),), nan), split_triples(0)).values())), 'margin')
    add('set_game', 'set_payback: margin (10,)', 'bad', lambda: set_payback(torch.zeros(10), split_triples(0)), 'margin')
    add('set_game', 'set_payback: pools a list', 'bad', lambda: set_payback(torch.randn(len(T)), [split_triples(0)]), 'pools')
    mg, yy = torch.tensor([1.0, -1.0, 0.5, -0.5]), torch.tensor([1, 1, 0, 0])
    add('set_game', 'shift_removed_acc: NaN margin', 'nan', lambda: torch.tensor(shift_removed_acc(torch.full((4,), nan), yy, 0.0)), 'margin')
    add('set_game', 'shift_removed_acc(shift=nan)', 'bad', lambda: shift_removed_acc(mg, yy, nan), 'shift')
    add('set_game', 'shift_removed_acc: one label', 'bad', lambda: shift_removed_acc(mg, torch.ones(4, dtype=torch.long), 0.0), 'y')
    add('set_game', 'shift_removed_acc: valid', 'valid', lambda: torch.tensor(shift_removed_acc(mg, yy, -2.0)))
    net = set_model('CoRelNet')
    add('set_game', 'order_averaged_margin: float idx', 'bad', lambda: order_averaged_margin(net, 'CoRelNet', T[:5].float()), 'idx')
    add('set_game', 'order_averaged_margin: card 81', 'bad', lambda: order_averaged_margin(net, 'CoRelNet', T[:5] + 81), 'idx')
    add('set_game', 'order_averaged_margin: unknown model', 'bad', lambda: order_averaged_margin(net, 'MLP', T[:5]), 'model')
    from relbook.set_game import official_corelnet, official_training_trial
    from relbook.harness import TrainConfig, config_key
    add('set_game', "official_corelnet('Abstractor')", 'bad', lambda: official_corelnet('Abstractor'), 'name')
    add('set_game', "official_training_trial(model='MLP')", 'bad', lambda: official_training_trial('MLP', 'book', 500, 0, 3, None), 'model')
    add('set_game', "official_training_trial(training='keras')", 'bad', lambda: official_training_trial('CoRelNet', 'keras', 500, 0, 3, None), 'training')
    for v in (-1, True, 1.5, '3'):
        add('harness', f'TrainConfig(start_from={v!r})', 'bad', lambda v=v: TrainConfig(start_from=v), 'start_from')
    add('harness', 'config_key(dict)', 'bad', lambda: config_key({'lr': 1e-3}), 'cfg')


# --- tpr -----------------------------------------------------------------------------------------
def _tpr():
    from relbook.tpr import (tpr_bind, tpr_unbind, dual_basis, TPMultiHeadAttention, tp_attention_reference, TPConfig,
                             TPTransformer)
    add('tpr', 'tpr_bind: m mismatch', 'bad', lambda: tpr_bind(torch.randn(2, 3, 4), torch.randn(2, 4, 5)), 'r')
    add('tpr', 'tpr_unbind: d_r mismatch', 'bad', lambda: tpr_unbind(torch.randn(2, 4, 5), torch.randn(2, 3, 6)), 'u')
    add('tpr', 'dual_basis: dependent roles', 'bad', lambda: dual_basis(torch.tensor([[[1., 0, 0], [2., 0, 0]]])), 'r')
    add('tpr', 'dual_basis: more roles than d_r', 'bad', lambda: dual_basis(torch.randn(1, 4, 3)), 'r')
    add('tpr', 'dual_basis: NaN', 'nan', lambda: dual_basis(with_nan(torch.randn(1, 2, 3))), 'r')
    add('tpr', 'dual_basis: int64 roles', 'bad', lambda: dual_basis(torch.ones(1, 2, 3, dtype=torch.long)), 'r')
    att = TPMultiHeadAttention(16, 2)
    mk = lambda n: torch.randn(2, n, 16)
    tensor_probes('tpr', 'TPMultiHeadAttention', lambda x: att(x, x), mk)
    add('tpr', 'TPMultiHeadAttention: key_pad wrong shape', 'bad', lambda: att(mk(3), mk(3), key_pad=torch.zeros(2, 4, dtype=torch.bool)), 'key_pad')
    add('tpr', 'TPMultiHeadAttention: key_pad wrong batch', 'bad', lambda: att(mk(3), mk(3), key_pad=torch.zeros(3, 3, dtype=torch.bool)), 'key_pad')
    add('tpr', 'TPMultiHeadAttention: key_pad float', 'bad', lambda: att(mk(3), mk(3), key_pad=torch.zeros(2, 3)), 'key_pad')
    add('tpr', 'TPMultiHeadAttention: key_pad int64', 'bad', lambda: att(mk(3), mk(3), key_pad=torch.zeros(2, 3, dtype=torch.long)), 'key_pad')
    full = torch.tensor([[True] * 3, [False] * 3])
    add('tpr', 'TPMultiHeadAttention: fully masked row', 'valid', lambda: att(mk(3), mk(3), key_pad=full))
    add('tpr', 'tp_attention_reference: fully masked row', 'valid', lambda: tp_attention_reference(att, mk(3), mk(3), key_pad=full))
    add('tpr', 'tp_attention_reference: NaN', 'nan', lambda: tp_attention_reference(att, with_nan(mk(3)), mk(3)), 'x')
    add('tpr', 'tp_attention_reference: key_pad wrong shape', 'bad', lambda: tp_attention_reference(att, mk(3), mk(3), key_pad=torch.zeros(2, 4, dtype=torch.bool)), 'key_pad')

    def half_grads(scale, dtype):
        a = TPMultiHeadAttention(16, 2).to(dtype)
        x = (torch.randn(2, 5, 16) * scale).to(dtype).requires_grad_()
        a(x, x).float().sum().backward()
        return (x.grad.float(), *(p.grad.float() for p in a.parameters()))
    add('tpr', 'TPMultiHeadAttention float16 x100: finite grads', 'valid', lambda: half_grads(100, torch.float16))
    add('tpr', 'TPMultiHeadAttention bfloat16 x100: finite grads', 'valid', lambda: half_grads(100, torch.bfloat16))
    for k, v in dict(vocab=0, d_model=0, n_heads=3, d_ff=0, pad_id=5, dropout=1.0, max_len=0).items():
        add('tpr', f'TPConfig({k}={v})', 'bad', lambda k=k, v=v: TPConfig(**{'vocab': 5, **{k: v}}), k if k != 'n_heads' else ('n_heads', 'd_model'))
    tp = TPTransformer(TPConfig(vocab=10, d_model=16, n_heads=2, d_ff=16, n_enc_layers=1, n_dec_layers=1, max_len=16))
    src = torch.randint(1, 10, (2, 5))
    add('tpr', 'TPTransformer: src id out of range', 'bad', lambda: tp(src + 10, src), 'src')
    add('tpr', 'TPTransformer: float src', 'bad', lambda: tp(src.float(), src), 'src')
    add('tpr', 'TPTransformer: too long', 'bad', lambda: tp(torch.randint(1, 10, (1, 17)), src[:1]), ('max_len', 'length'))
    add('tpr', 'TPTransformer.generate(n_steps=0)', 'bad', lambda: tp.generate(src, 0, src[:, :1]), 'n_steps')
    add('tpr', 'TPTransformer.generate: 1-D start', 'bad', lambda: tp.generate(src, 2, src[:, 0]), 'start')


# --- clifford ------------------------------------------------------------------------------------
def _clifford():
    from relbook.clifford import safe_sqrt, triple_product, simplex_volume, unsigned_scalar_product, CliffordAlgebra, gram_matrix
    add('clifford', 'safe_sqrt: NaN', 'nan', lambda: safe_sqrt(torch.tensor([nan, 4.0])), 'x')
    add('clifford', 'safe_sqrt: NaN gradient', 'nan',
        lambda: (lambda x: (safe_sqrt(x).sum().backward(), x.grad)[1])(torch.tensor([nan, 4.0], requires_grad=True)), 'x')
    add('clifford', 'safe_sqrt: eps=0', 'bad', lambda: safe_sqrt(torch.ones(2), eps=0), 'eps')
    add('clifford', 'safe_sqrt: eps=NaN', 'bad', lambda: safe_sqrt(torch.ones(2), eps=nan), 'eps')
    add('clifford', 'safe_sqrt: int64 x', 'bad', lambda: safe_sqrt(torch.ones(2, dtype=torch.long)), 'x')
    v = lambda: torch.randn(4, 3)
    add('clifford', 'triple_product: NaN', 'nan', lambda: triple_product(with_nan(v()), v(), v()), 'a')
    add('clifford', 'triple_product: inf', 'nan', lambda: triple_product(with_nan(v(), inf), v(), v()), 'a')
    add('clifford', 'triple_product: d mismatch', 'bad', lambda: triple_product(torch.randn(4, 3), torch.randn(4, 2), v()), ('a, b, c', 'vectors'))
    add('clifford', 'triple_product: int64', 'bad', lambda: triple_product(*(torch.ones(4, 3, dtype=torch.long),) * 3), ('a, b, c', 'vectors'))
    add('clifford', 'triple_product: zero vectors', 'valid', lambda: triple_product(torch.zeros(3), torch.zeros(3), torch.zeros(3)))
    add('clifford', 'simplex_volume: NaN', 'nan', lambda: simplex_volume(with_nan(v()), v()), 'vectors')
    add('clifford', 'unsigned_scalar_product: NaN', 'nan', lambda: unsigned_scalar_product(with_nan(v()), v(), v()), 'vectors')
    add('clifford', 'simplex_volume: no vectors', 'bad', lambda: simplex_volume(), 'vectors')
    add('clifford', 'gram_matrix: d mismatch', 'bad', lambda: gram_matrix(torch.randn(3), torch.randn(4)), 'vectors')
    add('clifford', 'CliffordAlgebra(n=0)', 'bad', lambda: CliffordAlgebra(0), 'n')
    add('clifford', 'CliffordAlgebra(n=9)', 'bad', lambda: CliffordAlgebra(9), 'n')


# --- simplicial ----------------------------------------------------------------------------------
def _simplicial():
    from relbook.simplicial import OneSimplicialAttention, TwoSimplicialAttention, SimplicialEncoder, SimplicialConfig
    one, two = OneSimplicialAttention(16, 2, 8), TwoSimplicialAttention(16, 1, 8)
    mk = lambda n: torch.randn(2, n, 16)
    for nm, m in (('OneSimplicialAttention', one), ('TwoSimplicialAttention', two)):
        tensor_probes('simplicial', nm, m, mk, edge_n=False)
        add('simplicial', f'{nm}: n = 0', 'bad', lambda m=m: m(mk(0)), 'x')          # documented: at least one entity
        add('simplicial', f'{nm}: n = 1', 'valid', lambda m=m: m(mk(1)))
        add('simplicial', f'{nm}: pad_mask float', 'bad', lambda m=m: m(mk(3), pad_mask=torch.ones(2, 3)), 'pad_mask')
        add('simplicial', f'{nm}: pad_mask all False', 'bad', lambda m=m: m(mk(3), pad_mask=torch.zeros(2, 3, dtype=torch.bool)), 'pad_mask')
        add('simplicial', f'{nm}: NaN in x, masked', 'nan',
            lambda m=m: m(with_nan(mk(3)), pad_mask=torch.tensor([[True, True, False]] * 2)), 'x')
    def half(scale, dtype):
        m = TwoSimplicialAttention(16, 1, 8).to(dtype)
        return m((torch.randn(2, 6, 16) * scale).to(dtype)).float()
    add('simplicial', 'TwoSimplicialAttention float16 x2', 'valid', lambda: half(2, torch.float16))
    add('simplicial', 'TwoSimplicialAttention float16 x4', 'valid', lambda: half(4, torch.float16))
    add('simplicial', 'TwoSimplicialAttention bfloat16 x4', 'valid', lambda: half(4, torch.bfloat16))
    half_probes('simplicial', 'OneSimplicialAttention', lambda: OneSimplicialAttention(16, 2, 8), lambda m, x: m(x), (10, 100))
    half_probes('simplicial', 'TwoSimplicialAttention', lambda: TwoSimplicialAttention(16, 1, 8), lambda m, x: m(x), (10,))
    add('simplicial', 'TwoSimplicialAttention(logit_scale=NaN)', 'bad', lambda: TwoSimplicialAttention(16, 1, 8, logit_scale=nan), 'logit_scale')
    add('simplicial', 'TwoSimplicialAttention(logit_scale=inf)', 'bad', lambda: TwoSimplicialAttention(16, 1, 8, logit_scale=inf), 'logit_scale')
    add('simplicial', 'TwoSimplicialAttention(n_virtual=-1)', 'bad', lambda: TwoSimplicialAttention(16, 1, 8, n_virtual=-1), 'n_virtual')
    add('simplicial', 'OneSimplicialAttention(d_head=0)', 'bad', lambda: OneSimplicialAttention(16, 2, 0), 'd_head')
    enc = SimplicialEncoder(SimplicialConfig(d_model=16, n_heads=2, d_head=8, n_heads2=1, d_head2=8, n_virtual=2, d_ff=16))
    tensor_probes('simplicial', 'SimplicialEncoder', enc, mk, arg='e', edge_n=False)
    add('simplicial', 'SimplicialEncoder: n = 1', 'valid', lambda: enc(mk(1)))
    add('simplicial', 'SimplicialConfig(logit_scale=inf)', 'bad', lambda: SimplicialConfig(logit_scale=inf), 'logit_scale')


# --- dat -----------------------------------------------------------------------------------------
def _dat():
    from relbook.dat import DualAttention, DATConfig, DATStack, DATSeq2Seq, DATLanguageModel, ViDAT, rope_angles
    mk = lambda n: torch.randn(2, n, 16)
    for impl in ('fast', 'factorised', 'reference'):
        da = DualAttention(16, 2, 2)
        tensor_probes('dat', f'DualAttention[{impl}]', lambda x, da=da, impl=impl: da(x, x, impl=impl) if x.dim() == 3 else da(x, mk(3), impl=impl), mk,
                      shape_bad=impl == 'fast', ints=impl == 'fast')
        full = torch.tensor([[False] * 3, [True] * 3])
        add('dat', f'DualAttention[{impl}]: fully masked row', 'valid', lambda da=da, impl=impl: da(mk(3), mk(3), key_padding_mask=full, impl=impl))
        add('dat', f'DualAttention[{impl}]: NaN in x, masked key', 'nan',
            lambda da=da, impl=impl: da(with_nan(mk(3)), mk(3), key_padding_mask=torch.tensor([[True, True, False]] * 2), impl=impl), 'x')
    for impl in ('fast', 'reference'):
        half_probes('dat', f'DualAttention[{impl}]', lambda: DualAttention(16, 2, 2), lambda m, x, impl=impl: m(x, x, impl=impl), (10, 100))
    da = DualAttention(16, 2, 2)
    add('dat', 'DualAttention: key_padding_mask wrong batch', 'bad', lambda: da(mk(3), mk(3), key_padding_mask=torch.ones(3, 3, dtype=torch.bool)), 'key_padding_mask')
    add('dat', 'DualAttention: key_padding_mask float', 'bad', lambda: da(mk(3), mk(3), key_padding_mask=torch.ones(2, 3) * 0.5), 'key_padding_mask')
    add('dat', 'DualAttention: symbols float64', 'bad', lambda: da(mk(3), mk(3).double()), 'symbols')
    dar = DualAttention(16, 0, 2)
    add('dat', 'DualAttention(relative symbols): n = 0', 'valid', lambda: dar(mk(0), torch.randn(5, 16)))
    add('dat', 'DualAttention(relative symbols): NaN', 'nan', lambda: dar(with_nan(mk(3)), torch.randn(5, 16)), 'x')
    for k, v in dict(n_relations=0, rel_proj_dim=0, n_kv_heads=0, rope_base=0.0).items():
        add('dat', f'DualAttention({k}={v})', 'bad', lambda k=k, v=v: DualAttention(16, 2, 2, rope=True, **{k: v}), k)
    for v in (-1.0, nan, inf):
        add('dat', f'DualAttention(rope_base={v})', 'bad', lambda v=v: DualAttention(16, 2, 2, rope=True, rope_base=v), 'rope_base')
    add('dat', 'rope_angles(base=-1)', 'bad', lambda: rope_angles(torch.arange(3), 4, -1.0), 'base')
    add('dat', "DualAttention(out_bias='yes')", 'bad', lambda: DualAttention(16, 2, 2, out_bias='yes'), 'out_bias')
    from relbook.dat import CrossAttention
    add('dat', 'CrossAttention(out_bias=1)', 'bad', lambda: CrossAttention(16, 2, out_bias=1), 'out_bias')
    add('dat', "CrossAttention(bias='no')", 'bad', lambda: CrossAttention(16, 2, bias='no'), 'bias')
    for k, v in dict(d_ff=0, n_relations=0, rel_proj_dim=0, n_kv_heads=0, n_heads_cross=0, max_rel_pos=0, n_symbols=0,
                     sym_heads=0, dropout=nan, d_model=0).items():
        add('dat', f'DATConfig({k}={v})', 'bad', lambda k=k, v=v: DATConfig(**{'d_model': 16, **{k: v}}).attention(), k)
    for v in ('q', True, 'OUT'):
        add('dat', f'DATConfig(attn_bias={v!r})', 'bad', lambda v=v: DATConfig(d_model=16, attn_bias=v), 'attn_bias')
    cfg = DATConfig(d_model=16, n_layers=1, n_heads_sa=1, n_heads_ra=1, max_len=16)
    st = DATStack(cfg)
    tensor_probes('dat', 'DATStack', st, mk, shape_bad=False)
    add('dat', 'DATStack: causal, n = 0', 'valid', lambda: st(mk(0), causal=True))
    add('dat', 'DATStack: key_padding_mask wrong batch', 'bad', lambda: st(mk(3), key_padding_mask=torch.ones(1, 3, dtype=torch.bool)), 'key_padding_mask')
    s2s = DATSeq2Seq(10, 11, cfg, cfg)
    src, tgt = torch.randint(1, 10, (2, 5)), torch.randint(0, 11, (2, 4))
    add('dat', 'DATSeq2Seq: src id out of range', 'bad', lambda: s2s(src + 10, tgt), 'src')
    add('dat', 'DATSeq2Seq: tgt id out of range', 'bad', lambda: s2s(src, tgt + 11), 'tgt')
    add('dat', 'DATSeq2Seq: negative id', 'bad', lambda: s2s(src - 20, tgt), 'src')
    add('dat', 'DATSeq2Seq: float src', 'bad', lambda: s2s(src.float(), tgt), 'src')
    add('dat', 'DATSeq2Seq: empty target', 'valid', lambda: s2s(src, tgt[:, :0]))
    add('dat', 'DATSeq2Seq.generate(n_steps=0)', 'bad', lambda: s2s.generate(src, 0, tgt[:, :1]), 'n_steps')
    add('dat', 'DATSeq2Seq.generate: 1-D start', 'bad', lambda: s2s.generate(src, 2, tgt[:, 0]), 'start')
    lm = DATLanguageModel(11, cfg)
    idx = torch.randint(0, 11, (2, 3))
    add('dat', 'DATLanguageModel: n = 0', 'valid', lambda: lm(idx[:, :0]))
    add('dat', 'DATLanguageModel: n = 1', 'valid', lambda: lm(idx[:, :1]))
    add('dat', 'DATLanguageModel: float ids', 'bad', lambda: lm(idx.float()), 'idx')
    add('dat', 'DATLanguageModel: id out of range', 'bad', lambda: lm(idx + 11), 'idx')
    for v in (0, -1, 1.5, True):
        add('dat', f'generate(top_k={v})', 'bad', lambda v=v: lm.generate(idx, 2, top_k=v), 'top_k')
    for v in (nan, inf, -1.0, 'hot'):
        add('dat', f'generate(temperature={v})', 'bad', lambda v=v: lm.generate(idx, 2, temperature=v), 'temperature')
    add('dat', 'generate: 1-D prompt', 'bad', lambda: lm.generate(idx[0], 2), 'idx')
    add('dat', 'generate: empty prompt', 'bad', lambda: lm.generate(idx[:, :0], 2), 'idx')
    add('dat', 'generate(max_new_tokens=0)', 'bad', lambda: lm.generate(idx, 0), 'max_new_tokens')
    add('dat', 'generate(top_k=1)', 'valid', lambda: lm.generate(idx, 2, top_k=1).float())
    add('dat', 'generate(top_k > vocab)', 'valid', lambda: lm.generate(idx, 2, top_k=100).float())
    vit = ViDAT(8, 4, 1, 3, cfg)
    img = lambda: torch.randn(2, 1, 8, 8)
    add('dat', 'ViDAT: float64 images', 'bad', lambda: vit(img().double()), 'images')
    add('dat', 'ViDAT: uint8 images', 'bad', lambda: vit(img().abs().to(torch.uint8)), 'images')
    add('dat', 'ViDAT: wrong channels', 'bad', lambda: vit(torch.randn(2, 3, 8, 8)), 'images')
    add('dat', 'ViDAT: NaN', 'nan', lambda: vit(with_nan(img())), 'images')
    add('dat', 'ViDAT(patch_size=3)', 'bad', lambda: ViDAT(8, 3, 1, 3, cfg), ('patch_size', 'image_size'))
    # issue 18: the official vision front-end and bias-free relation maps
    from relbook.dat import PatchEmbedding
    add('dat', "ViDAT(pool='max')", 'bad', lambda: ViDAT(8, 4, 1, 3, cfg, pool='max'), 'pool')
    add('dat', 'ViDAT(n_classes=0)', 'bad', lambda: ViDAT(8, 4, 1, 0, cfg), 'n_classes')
    vit_mean = ViDAT(8, 4, 1, 1, cfg, pool='mean')
    add('dat', "ViDAT(pool='mean'): NaN", 'nan', lambda: vit_mean(with_nan(img())), 'images')
    add('dat', 'ViDAT: all-zero images', 'valid', lambda: vit_mean(torch.zeros(2, 1, 8, 8)))    # empty patches: LayerNorm of a constant
    add('dat', 'PatchEmbedding(d_model=0)', 'bad', lambda: PatchEmbedding(8, 4, 1, 0), 'd_model')
    add('dat', 'PatchEmbedding: wrong image size', 'bad', lambda: PatchEmbedding(8, 4, 1, 16)(torch.randn(2, 1, 12, 12)), 'images')
    for v in ('yes', 1, None):
        add('dat', f'DualAttention(rel_bias={v!r})', 'bad', lambda v=v: DualAttention(16, 2, 2, rel_bias=v), 'rel_bias')
        add('dat', f'DATConfig(rel_bias={v!r})', 'bad', lambda v=v: DATConfig(d_model=16, rel_bias=v), 'rel_bias')
    from relbook.relgames import relgames_data          # chapter 13's data splits (module label 'relgames')
    add('relgames', "relgames_data(ood='stripes')", 'bad', lambda: relgames_data('same', 4, 4, 4, ood='stripes'), 'ood')
    add('relgames', "relgames_data(ood=('novel',))", 'bad', lambda: relgames_data('same', 4, 4, 4, ood=('novel',)), 'ood')
    add('relgames', "relgames_data(objects='train', ood=('train',))", 'bad', lambda: relgames_data('same', 4, 4, 4, objects='train', ood=('train',)), 'ood')
    add('relgames', "relgames_data(objects='all')", 'bad', lambda: relgames_data('same', 4, 4, 4, objects='all'), 'objects')


# --- message passing -----------------------------------------------------------------------------
def _message_passing():
    from relbook.message_passing import message_pass, SymbolicMessagePassing, SMPConfig
    R, S = torch.randn(2, 4, 4, 3), torch.randn(2, 4, 8)
    add('message_passing', 'message_pass: m mismatch', 'bad', lambda: message_pass(R, torch.randn(2, 5, 8)), ('S', 'R'))
    add('message_passing', 'message_pass: NaN', 'nan', lambda: message_pass(with_nan(R), S), 'R')
    add('message_passing', 'message_pass: int64 R', 'bad', lambda: message_pass(R.long(), S), 'R')


# --- CLI -----------------------------------------------------------------------------------------
def _cli(tree: str | None):
    env = dict(os.environ, RELBOOK_PROFILE='smoke', OMP_NUM_THREADS='1')
    import relbook
    root = os.path.dirname(os.path.dirname(os.path.abspath(relbook.__file__)))   # `python -m` puts the cwd first on sys.path:
    def run(*args):                                                                 # run from the probed tree's root
        r = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=300, cwd=root)
        return r.returncode, r.stdout + r.stderr
    def expect_fail(*args):
        def f():
            rc, out = run(*args)
            if rc == 0: return 'ran (exit 0)'
            raise SystemExit(out.strip().splitlines()[-1] if out.strip() else f'exit {rc}')
        return f
    def expect_ok(*args, needle=''):
        def f():
            rc, out = run(*args)
            if rc != 0 or needle not in out: return f'FAIL exit {rc}: {out[-200:]}'
            return torch.zeros(1)
        return f
    add('cli', 'python -m relbook list', 'valid', expect_ok('-m', 'relbook', 'list', needle='order_relation'))
    add('cli', 'python -m relbook.harness list', 'valid', expect_ok('-m', 'relbook.harness', 'list', needle='order_relation'))
    add('cli', 'python -m relbook.harness run no_such_exp', 'bad', expect_fail('-m', 'relbook.harness', 'run', 'no_such_exp'), 'no_such_exp')
    add('cli', 'python -m relbook run robust_lasso_rate no_such_exp', 'bad',
        expect_fail('-m', 'relbook', 'run', 'robust_lasso_rate', 'no_such_exp'), 'no_such_exp')
    add('cli', 'python -m relbook run --profile huge x', 'bad', expect_fail('-m', 'relbook', 'run', '--profile', 'huge', 'x'), 'profile')


BUILDERS = {'core': _core, 'relations': _relations, 'abstractor': _abstractor, 'set_game': _set_game, 'tpr': _tpr,
            'clifford': _clifford,
            'simplicial': _simplicial, 'dat': _dat, 'message_passing': _message_passing}

def build(modules=None, cli: bool = True) -> list[Probe]:
    "Build the probe table (all modules, or the named ones). A module that fails to build counts its error as one obscure probe."
    PROBES.clear()
    for name, b in BUILDERS.items():
        if modules and name not in modules: continue
        try: b()
        except Exception as e:                                # noqa: BLE001
            add(name, f'<building the {name} probes>', 'bad', lambda e=e: (_ for _ in ()).throw(RuntimeError(f'{type(e).__name__}: {e}')))
    if cli and (not modules or 'cli' in modules): _cli(None)
    return list(PROBES)

OUTCOMES = ('clear', 'ok', 'obscure', 'silent', 'nan_finite', 'valid_failed')

def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--verbose', action='store_true'); ap.add_argument('--no-cli', action='store_true')
    ap.add_argument('modules', nargs='*')
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    import relbook
    print('relbook from', os.path.dirname(relbook.__file__))
    probes = build(a.modules or None, cli=not a.no_cli)
    rows = []
    for p in probes:
        out, detail = classify(p)
        rows.append((p, out, detail))
        if a.verbose or out not in ('clear', 'ok'): print(f'{out:13s} {p.module:16s} {p.name:55s} {detail}')
    by_mod = {}
    for p, out, _ in rows: by_mod.setdefault(p.module, Counter())[out] += 1
    tot = Counter(out for _, out, _ in rows)
    print(f"\n{'module':16s} " + ' '.join(f'{o:>12s}' for o in OUTCOMES) + f"{'total':>7s}")
    for m, c in by_mod.items(): print(f'{m:16s} ' + ' '.join(f'{c[o]:12d}' for o in OUTCOMES) + f'{sum(c.values()):7d}')
    print(f"{'TOTAL':16s} " + ' '.join(f'{tot[o]:12d}' for o in OUTCOMES) + f'{len(rows):7d}')
    return 0

if __name__ == '__main__':
    sys.exit(main())
