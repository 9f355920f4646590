"""Chapter 2 (relbook.message_passing): public API, bad inputs, fast vs reference, recovery sanity."""
import math

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn as nn

from relbook import message_passing as mp
from relbook.core import using_profile
from relbook.harness import EXPERIMENTS, run_experiment
from relbook.message_passing import (CORRUPTIONS, SMPConfig, MessagePassingLayer, SymbolicMessagePassing, corrupt,
                                     l1_recover, lasso_lambda, message_pass, message_pass_reference,
                                     recovery_boundary, recovery_trial, robust_lasso)
from relbook.relations import MultiHeadRelation


def _rand(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# --- public API -------------------------------------------------------------------------------

def test_public_api():
    for name in ('message_pass', 'message_pass_reference', 'SMPConfig', 'MessagePassingLayer',
                 'SymbolicMessagePassing', 'l1_recover', 'robust_lasso', 'corrupt', 'recovery_boundary',
                 'recovery_phase_transition', 'robust_lasso_rate', 'lasso_lambda'):
        assert name in mp.__all__, name
    assert EXPERIMENTS['recovery_phase_transition'] is mp.recovery_phase_transition
    assert EXPERIMENTS['robust_lasso_rate'] is mp.robust_lasso_rate


def test_message_pass_worked_example():
    R = torch.tensor([[0., 1, 0], [0, 0, 1], [1, 0, 0]])[None, :, :, None]   # successor relation
    S = torch.tensor([[1., 0], [0, 1], [1, 1]])
    assert torch.equal(message_pass(R, S)[0], S[[1, 2, 0]])


def test_concatenation_layout_lemma_3_1():
    "Identity symbols reproduce R; R[i, j, k] sits at position k·m + j of a_i."
    m, d_r = 5, 3
    R = _rand(2, m, m, d_r)
    out = message_pass(R, torch.eye(m, dtype=torch.float64))
    assert out.shape == (2, m, d_r * m)
    assert torch.equal(out.view(2, m, d_r, m).permute(0, 1, 3, 2), R)


# --- fast vs reference ------------------------------------------------------------------------

@pytest.mark.parametrize('d_r', [1, 3])
@pytest.mark.parametrize('masked', [False, True])
@pytest.mark.parametrize('batched_S', [False, True])
def test_fast_matches_reference(d_r, masked, batched_S):
    b, m, d_s = 3, 6, 4
    R = _rand(b, m, m, d_r, seed=1)
    S = _rand(b, m, d_s, seed=2) if batched_S else _rand(m, d_s, seed=2)
    mask = (torch.rand(b, m, generator=torch.Generator().manual_seed(3)) > 0.3) if masked else None
    fast, ref = message_pass(R, S, mask), message_pass_reference(R, S, mask)
    assert fast.shape == (b, m, d_r * d_s)
    assert torch.allclose(fast, ref, atol=1e-12, rtol=0)


def test_mask_equals_cutting_the_padding():
    R, S = _rand(2, 7, 7, 2, seed=4), _rand(7, 3, seed=5)
    R[:, :, 5:] = float('nan')                                         # padded senders must not leak, even as NaN
    mask = torch.arange(7)[None].expand(2, 7) < 5
    out = message_pass(R, S, mask)
    assert torch.allclose(out[:, :5], message_pass(R[:, :5, :5], S[:5]), atol=1e-12)
    assert (out[:, 5:] == 0).all()


# --- the module -------------------------------------------------------------------------------

def test_symbolic_message_passing_shapes_mask_and_grad():
    torch.manual_seed(0)
    smp = SymbolicMessagePassing(max_m=8, d_s=16, d_r=2, n_layers=3, d_ff=32)
    assert smp.symbols.shape == (8, 16) and len(smp.layers) == 3
    R = torch.randn(4, 6, 6, 2)
    mask = torch.ones(4, 6, dtype=torch.bool); mask[1, 4:] = False
    A = smp(R, mask)
    assert A.shape == (4, 6, 16) and (A[1, 4:] == 0).all()
    assert torch.allclose(A[1, :4], smp(R[1:2, :4, :4])[0], atol=1e-5)
    A.pow(2).sum().backward()
    assert smp.symbols.grad is not None and smp.symbols.grad[:6].abs().sum() > 0
    assert (smp.symbols.grad[6:] == 0).all()                           # unused symbols get no gradient


def test_residual_norm_and_config_replace():
    cfg = SMPConfig(max_m=5, d_s=8, d_r=1)
    smp = SymbolicMessagePassing(cfg, residual_norm=True, n_layers=2)
    assert smp.cfg.residual_norm and smp.cfg.n_layers == 2 and not cfg.residual_norm
    assert isinstance(smp.layers[0].norm, nn.LayerNorm)
    assert SymbolicMessagePassing(cfg).layers[0].norm is None           # Algorithm 1: no residual/norm
    assert smp(torch.randn(2, 5, 5, 1)).shape == (2, 5, 8)


def test_module_identity_symbols_reproduce_R():
    m = 6
    smp = SymbolicMessagePassing(max_m=m, d_s=m, d_r=1).double()
    with torch.no_grad(): smp.symbols.copy_(torch.eye(m))
    smp.layers[0].phi = nn.Identity()
    R = _rand(3, m, m, 1, seed=6)
    assert torch.allclose(smp(R), R[..., 0], atol=1e-12)


def test_fed_by_multi_head_relation():
    torch.manual_seed(1)
    rel = MultiHeadRelation(d_in=5, d_r=3, d_p=4, activation='softmax')
    smp = SymbolicMessagePassing(max_m=10, d_s=12, d_r=3)
    assert smp(rel(torch.randn(2, 9, 5))).shape == (2, 9, 12)


# --- bad inputs -------------------------------------------------------------------------------

@pytest.mark.parametrize('fn', [message_pass, message_pass_reference])
def test_message_pass_bad_inputs(fn):
    R, S = torch.randn(2, 4, 4, 3), torch.randn(4, 5)
    cases = [((torch.randn(2, 4, 5, 3), S), 'R must have shape'),
             ((torch.randn(4, 4, 3), S), 'R must have shape'),
             ((R, torch.randn(3, 5)), 'S must have shape'),
             ((R, torch.randn(3, 4, 5)), 'S must have shape'),
             ((R, torch.randn(5)), 'S must be a tensor of shape'),
             ((R, S.double()), "S must have R's dtype"),
             ((R, S, torch.ones(2, 4)), 'mask must be a bool'),
             ((R, S, torch.ones(2, 3, dtype=torch.bool)), 'mask must have shape')]
    for args, msg in cases:
        with pytest.raises(ValueError, match=msg): fn(*args)


def test_module_bad_inputs():
    smp = SymbolicMessagePassing(max_m=4, d_s=8, d_r=2)
    with pytest.raises(ValueError, match='max_m=4'): smp(torch.randn(1, 5, 5, 2))
    with pytest.raises(ValueError, match='R must have shape'): smp(torch.randn(1, 4, 4, 3))
    with pytest.raises(ValueError, match='mask must'): smp(torch.randn(1, 4, 4, 2), torch.ones(1, 4))
    for field in ('max_m', 'd_s', 'd_r', 'n_layers', 'd_ff'):
        with pytest.raises(ValueError, match=f'{field} must be a positive int'): SMPConfig(**{field: 0})
    with pytest.raises(ValueError, match='d_s must be a positive int'): SymbolicMessagePassing(d_s=-1)


def test_lp_bad_inputs():
    S = np.random.default_rng(0).standard_normal((6, 3))
    with pytest.raises(ValueError, match='A must have d=6 rows'): l1_recover(np.ones((5, 2)), S)
    with pytest.raises(ValueError, match='A must be a non-empty 2-D'): l1_recover(np.ones(6), S)
    with pytest.raises(ValueError, match='S must be a non-empty 2-D'): l1_recover(np.ones((6, 2)), np.ones((6, 0)))
    with pytest.raises(ValueError, match='A must be finite'): l1_recover(np.full((6, 1), np.nan), S)
    for lam in (-1.0, float('nan'), float('inf'), True, 'big'):
        with pytest.raises(ValueError, match='lam must be'): robust_lasso(np.ones((6, 1)), S, lam)
    with pytest.raises(ValueError, match=r'eps must be a finite number in \[0, 1\]'): corrupt(np.ones((6, 1)), S, 1.5)
    with pytest.raises(ValueError, match='kind must be one of'): corrupt(np.ones((6, 1)), S, 0.1, kind='uniform')
    with pytest.raises(ValueError, match='A must have d=6 rows'): corrupt(np.ones((5, 1)), S, 0.1)
    with pytest.raises(ValueError, match='d must be a positive int'): lasso_lambda(0, 10)
    with pytest.raises(ValueError, match='df lacks columns'): recovery_boundary(pd.DataFrame({'eps': [0.0]}))


# --- recovery ---------------------------------------------------------------------------------

@pytest.mark.parametrize('kind', CORRUPTIONS)
def test_l1_recover_exact_with_redundant_symbols(kind):
    rng = np.random.default_rng(0)
    S, R = rng.standard_normal((60, 15)), rng.standard_normal((15, 6))    # d/m = 4
    A = corrupt(S @ R, S, 0.1, kind, rng=rng)
    assert np.abs(l1_recover(A, S) - R).max() < 1e-8
    assert np.abs(l1_recover(torch.from_numpy(A), torch.from_numpy(S)) - R).max() < 1e-8   # tensors accepted


def test_l1_recover_fails_without_redundancy():
    rng = np.random.default_rng(1)
    S, R = rng.standard_normal((10, 10)), rng.standard_normal((10, 3))    # d = m: S⁻¹a fits any corruption
    A = corrupt(S @ R, S, 0.2, 'gaussian', rng=rng)
    assert np.allclose(l1_recover(A, S), np.linalg.solve(S, A), atol=1e-6)
    assert np.abs(l1_recover(A, S) - R).max() > 1


def test_robust_lasso_sparse_recovery():
    rng = np.random.default_rng(2)
    d, m = 80, 150
    S, R = rng.standard_normal((d, m)), np.zeros((m, 3))
    for j in range(3): R[rng.choice(m, 3, replace=False), j] = rng.dirichlet(np.ones(3))
    A = corrupt(S @ R + 0.01 * rng.standard_normal((d, 3)), S, 0.1, 'gaussian', rng=rng)
    err = np.linalg.norm(robust_lasso(A, S, lasso_lambda(d, m, 0.5)) - R, axis=0)
    assert err.max() < 0.05, err
    assert np.allclose(robust_lasso(S @ R, S, 0.0), l1_recover(S @ R, S), atol=1e-6)   # lam = 0 is (3.10)


def test_corrupt_counts_and_aligned_lie():
    rng = np.random.default_rng(3)
    S, R = rng.standard_normal((40, 8)), rng.standard_normal((8, 5))
    clean = S @ R
    for kind in CORRUPTIONS:
        bad = corrupt(clean, S, 0.25, kind, rng=rng) != clean
        assert (bad.sum(0) == 10).all()
    diff = corrupt(clean, S, 0.25, 'aligned', rng=rng) - clean
    for j in range(5):                                                  # corrupted rows agree on one r_j + v_j
        rows = np.flatnonzero(diff[:, j])
        v = np.linalg.lstsq(S[rows], diff[rows, j], rcond=None)[0]
        assert np.abs(S[rows] @ v - diff[rows, j]).max() < 1e-8 and np.linalg.norm(v) > 10


def test_recovery_boundary_interpolates_and_censors():
    df = pd.DataFrame({'corruption': ['gaussian'] * 6, 'ratio': [2] * 3 + [4] * 3,
                       'eps': [0.0, 0.1, 0.2] * 2, 'recovered': [1.0, 0.75, 0.25, 1.0, 1.0, 0.9]})
    bd = recovery_boundary(df).set_index('ratio')
    assert math.isclose(bd.loc[2, 'eps_star'], 0.15) and not bd.loc[2, 'censored']
    assert bd.loc[4, 'eps_star'] == 0.2 and bd.loc[4, 'censored']


def test_recovery_trial_is_deterministic_and_sane():
    a = recovery_trial(m=8, ratio=3, eps=0.1, corruption='gaussian', seed=0)
    assert a == recovery_trial(m=8, ratio=3, eps=0.1, corruption='gaussian', seed=0)
    assert a['d'] == 24 and a['recovered'] == 1.0
    assert recovery_trial(m=8, ratio=1, eps=0.25, corruption='aligned', seed=0)['recovered'] < 0.5


def test_experiments_run_at_smoke(tmp_path, monkeypatch):
    monkeypatch.setenv('RELBOOK_RESULTS', str(tmp_path))
    with using_profile('smoke'):
        pt = run_experiment('recovery_phase_transition')
        rl = run_experiment('robust_lasso_rate')
    assert {'recovered', 'all_recovered', 'max_err', 'd'} <= set(pt.columns)
    assert (pt[pt.eps == 0].recovered == 1).all()
    assert {'err', 'rate'} <= set(rl.columns) and (rl.err > 0).all()
    assert (tmp_path / 'recovery_phase_transition-smoke.jsonl').exists()


# --- the chapter's claims (relbook.evidence ledger) -------------------------------------------

def test_chapter_claims_are_declared():
    from relbook.evidence import CLAIMS
    ids = {c.id for c in CLAIMS.values() if c.chapter == '02_message_passing'}
    assert ids == {c.id for c in mp.MESSAGE_PASSING_CLAIMS}
    assert ids == {'recovery-boundary-rises-gaussian-errors', 'recovery-boundary-rises-aligned-errors',
                   'robust-lasso-error-rate-c0.5', 'robust-lasso-error-rate-c1'}


def test_recovery_claim_reads_one_boundary_per_seed():
    from relbook.evidence import CLAIMS
    eps = [0.0, 0.1, 0.2, 0.3]
    rate = {1: [1.0, 0.0, 0.0, 0.0], 4: [1.0, 1.0, 0.75, 0.25]}                  # ε* = 0.05 at d/m = 1, 0.25 at d/m = 4
    rows = pd.DataFrame([dict(corruption=k, ratio=r, eps=e, seed=s, recovered=rate[r][i])
                         for k in CORRUPTIONS for r in rate for i, e in enumerate(eps) for s in range(6)])
    ev = CLAIMS['recovery-boundary-rises-aligned-errors'].evaluate(rows)        # 6 seeds, one boundary each: the sign test decides
    assert ev.comparison.verdict == 'supports the paper' and math.isclose(ev.comparison.effect, 0.2)
    assert ev.convergence_keys is False and ev.note == ''
    rows.loc[rows.ratio == 4, 'recovered'] = 1.0                                  # recovered everywhere: censored
    ev = CLAIMS['recovery-boundary-rises-gaussian-errors'].evaluate(rows)
    assert math.isclose(ev.comparison.effect, 0.25) and 'lower bound' in ev.note
    assert CLAIMS['recovery-boundary-rises-gaussian-errors'].evaluate(rows[rows.ratio == 1]).comparison is None


def test_lasso_claims_judge_the_slope_as_a_bound():
    """(3.18) is an upper bound, error ≤ C·rate: only an error falling more slowly than the rate (slope below 1 − margin)
    breaks it; a steeper slope cannot (it read as 'contradicts' under the proportionality reading before 2026-11-30)."""
    from relbook.evidence import CLAIMS
    rng = np.random.default_rng(0)
    def rows(power, seeds, sigma=None):
        return pd.DataFrame([dict(lam_c=c, seed=s, d=d, k=k, rate=0.1 * math.sqrt(k / d), err=(0.1 * math.sqrt(k / d)) ** power * math.exp(0.01 * rng.standard_normal()),
                                  **({} if sigma is None else {'sigma': sigma}))
                             for c in (0.5, 1.0) for s in range(seeds) for d in (50, 100, 200) for k in (1, 4)])
    assert CLAIMS['robust-lasso-error-rate-c0.5'].evaluate(rows(1.0, 3)).comparison.verdict == 'supports the paper'
    assert CLAIMS['robust-lasso-error-rate-c1'].evaluate(rows(1.6, 3)).comparison.verdict == 'supports the paper'    # steeper: no bound broken
    assert CLAIMS['robust-lasso-error-rate-c1'].evaluate(rows(0.8, 3)).comparison.verdict == 'supports the paper'    # within the margin
    assert CLAIMS['robust-lasso-error-rate-c1'].evaluate(rows(0.5, 3)).comparison.verdict == 'contradicts the paper' # outgrows any C
    assert CLAIMS['robust-lasso-error-rate-c1'].evaluate(rows(1.0, 2)).comparison.verdict == 'insufficient data'
    ev = CLAIMS['robust-lasso-error-rate-c1'].evaluate(rows(1.0, 3, sigma=0.02))       # some cells' error below σ: their slope too
    assert 'over the cells whose error stays below σ only: slope 1.0' in ev.note, ev.note


def test_recovery_claim_measures_the_rise_from_above_d_equal_m():
    """At d/m = 1 the LP fits any corrupted column exactly, so ε* there is 0 by construction: the rise is measured from the
    smallest ratio above 1 (the review of 2026-11-30), over seeds without pairing (each ratio draws its own data)."""
    from relbook.evidence import CLAIMS
    eps = [0.0, 0.1, 0.2, 0.3]
    rate = {1: [1.0, 0.0, 0.0, 0.0], 2: [1.0, 1.0, 0.25, 0.0], 4: [1.0, 1.0, 0.75, 0.25]}   # ε* 0.05, 0.15, 0.25
    rows = pd.DataFrame([dict(corruption=k, ratio=r, eps=e, seed=s, recovered=rate[r][i] if s else min(1.0, rate[r][i] + 0.1 * (r == 4)))
                         for k in CORRUPTIONS for r in rate for i, e in enumerate(eps) for s in range(6)])
    ev = CLAIMS['recovery-boundary-rises-aligned-errors'].evaluate(rows)
    assert 'at d/m = 2' in ev.ours and 'Welch' in ev.comparison.method, (ev.ours, ev.comparison.method)
    assert ev.comparison.verdict == 'supports the paper' and 0.07 < ev.comparison.effect < 0.12   # from d/m = 1 it would be about 0.2
