"Tests of the mathematics benchmark's analysis tools (relbook.mathbench)."
import numpy as np
import pytest
from relbook.mathbench import fraction_roles, cluster_evidence, value_probe, register_math_model, math_model, MATH_MODELS


def test_fraction_roles():
    lab = fraction_roles('What is (-12)/3 + 7/(-45)?')
    s = ''.join({'num': 'n', 'den': 'd', None: '.'}[l] for l in lab)
    assert s == '..........nn..d...n...dd..'
    assert fraction_roles('1/2/3') == ['num', None, None, None, 'den']   # 2 is both: unlabelled


def test_cluster_evidence_detects_and_rejects():
    rng = np.random.default_rng(0)
    y = ['num'] * 50 + ['den'] * 50
    good = cluster_evidence(np.array([0] * 50 + [1] * 50), y, n_perm=100)
    bad = cluster_evidence(rng.integers(0, 2, 100), y, n_perm=100)
    assert good['nmi'] > 0.99 and good['p_value'] < 0.02
    assert bad['nmi'] < 0.1 and bad['p_value'] > 0.02


def test_value_probe():
    rng = np.random.default_rng(0)
    S = rng.normal(size=(300, 4))
    V = np.stack([S @ rng.normal(size=(4, 4)) + 1.0, rng.normal(size=(300, 4))], 1)
    out = value_probe(V, S)
    assert out['mse_head0'] < 1e-20 and out['mse_head1'] > 0.5 * out['var']
    with pytest.raises(ValueError, match="values must be"): value_probe(V[:, 0], S)


def test_registry():
    assert {'Transformer', 'Transformer+', 'Abstractor (d)', 'TP-Transformer', 'TP-Transformer (no roles)'} <= set(MATH_MODELS)
    with pytest.raises(ValueError, match="build must be callable"): register_math_model('x', 3)
    with pytest.raises(ValueError, match="name must be one of"): math_model('GPT')
