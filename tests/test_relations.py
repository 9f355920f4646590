"""Chapter 1 public API: MultiHeadRelation, its reference, CoRelNet, and the experiment trials."""
import math
import pytest
import torch
import torch.nn as nn
from relbook.relations import (MultiHeadRelation, multi_head_relation_reference, CoRelNet, PairRelationClassifier,
                               RELATION_ACTIVATIONS, mlp, order_relation_data, kernel_gram, grid_points,
                               best_rank_sup_error, order_relation_trial, kernel_fit_trial, relation_activation)


@pytest.mark.parametrize('activation', RELATION_ACTIVATIONS)
@pytest.mark.parametrize('symmetric', [False, True])
def test_fast_matches_reference(activation, symmetric):
    torch.manual_seed(0)
    rel = MultiHeadRelation(5, 2, 3, symmetric=symmetric, activation=activation).double()
    x, y = torch.randn(2, 4, 5, dtype=torch.float64), torch.randn(2, 3, 5, dtype=torch.float64)
    mask, y_mask = torch.tensor([[1, 1, 0, 1], [1, 0, 1, 1]]).bool(), torch.tensor([[1, 0, 1], [0, 1, 1]]).bool()
    for args in [(x,), (x, None, mask), (x, y, mask, y_mask)]:
        torch.testing.assert_close(rel(*args), multi_head_relation_reference(rel, *args), atol=1e-10, rtol=0)


def test_symmetric_relation_is_symmetric_psd():
    rel = MultiHeadRelation(6, 3, 4, symmetric=True).double()
    R = rel(torch.randn(1, 20, 6, dtype=torch.float64)).detach()[0]
    for k in range(3):
        assert torch.allclose(R[:, :, k], R[:, :, k].T, atol=1e-12)
        assert torch.linalg.eigvalsh(R[:, :, k]).min() > -1e-10


def test_masked_pairs_are_zero_and_softmax_ignores_masked_keys():
    rel = MultiHeadRelation(3, 1, 2, activation='softmax')
    x = torch.randn(1, 4, 3); mask = torch.tensor([[True, True, False, True]])
    R = rel(x, mask=mask)[0, :, :, 0]
    assert torch.all(R[2] == 0) and torch.all(R[:, 2] == 0)
    assert torch.allclose(R[[0, 1, 3]].sum(-1), torch.ones(3))
    # a row whose keys are all masked is zeros, not NaN
    out = relation_activation(torch.randn(1, 2, 2, 1), 'softmax', torch.zeros(1, 2, dtype=torch.bool))
    assert torch.all(out == 0)


def test_relation_bad_inputs():
    rel = MultiHeadRelation(4, 2, 3)
    with pytest.raises(ValueError, match=r'x must have shape \(b, m, 4\)'):
        rel(torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match=r'y must have shape \(b, n, 4\) with b=2'):
        rel(torch.randn(2, 3, 4), torch.randn(3, 3, 4))
    with pytest.raises(ValueError, match='y_mask must have shape'):
        rel(torch.randn(2, 3, 4), torch.randn(2, 5, 4), y_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match='d_p must be a positive int'):
        MultiHeadRelation(4, 2, -1)
    with pytest.raises(ValueError, match='depth must be >= 0'):
        mlp(2, 3, 4, depth=-1)


def test_symmetric_shares_weights():
    rel = MultiHeadRelation(4, 2, 3, symmetric=True)
    assert rel.W1 is rel.W2 and sum(p.numel() for p in rel.parameters()) == 4 * 6


def test_corelnet_shapes_and_symmetry():
    net = CoRelNet(8, 3, 5)
    assert net(torch.randn(7, 3, 8)).shape == (7, 5)
    R = net.relation(torch.randn(2, 3, 8))
    assert torch.allclose(R.sum(2), torch.ones(2, 3, 1))                  # softmax rows
    assert CoRelNet(8, 2, 2, symmetric=False).relation.W1 is not CoRelNet(8, 2, 2, symmetric=False).relation.W2
    with pytest.raises(ValueError, match='x must have shape'):
        net(torch.randn(7, 2, 8))


def test_corelnet_without_diagonal():
    "diagonal=False: the MLP reads the m(m-1) entries i != j; with a symmetric relation and no softmax a pair and its reverse agree."
    net = CoRelNet(8, 3, 2, diagonal=False)
    assert net.head[0].in_features == 6 and net(torch.randn(4, 3, 8)).shape == (4, 2)
    pair, x = CoRelNet(8, 2, 2, softmax=False, diagonal=False), torch.randn(32, 2, 8)
    with torch.no_grad():
        assert torch.allclose(pair(x), pair(x.flip(1)), atol=1e-6)
        full = CoRelNet(8, 2, 2, softmax=False)                               # with the diagonal: no such symmetry
        assert (full(x) - full(x.flip(1))).abs().max() > 1e-3
    with pytest.raises(ValueError, match='diagonal=False needs m >= 2'):
        CoRelNet(8, 1, 2, diagonal=False)


def test_symmetric_pair_classifier_cannot_order():
    "r(x, y) = r(y, x) => identical logits for (x, y) and (y, x)."
    clf = PairRelationClassifier(MultiHeadRelation(8, 4, 16, symmetric=True, embedder=mlp(8, 16, 8), d_e=8))
    p = torch.randn(10, 2, 8)
    assert torch.allclose(clf(p), clf(p.flip(1)), atol=1e-6)


def test_order_data():
    X, y, idx = order_relation_data(5, 3, torch.Generator().manual_seed(0))
    assert X.shape == (25, 2, 3) and y.sum() == 10 and torch.equal(y, (idx[:, 0] < idx[:, 1]).long())


def test_mercer_floor():
    K = kernel_gram('poly2', grid_points(7))
    assert best_rank_sup_error(K, 6) < 1e-10 < best_rank_sup_error(K, 5)
    with pytest.raises(ValueError, match='kernel must be one of'):
        kernel_gram('laplace', grid_points(3))


def test_trials_run_and_report():
    out = order_relation_trial('relation (asym)', 64, 0, 2)
    assert 0 <= out['test_acc'] <= 1 and out['n_params'] > 0
    with pytest.raises(ValueError, match='n_train must be <='):
        order_relation_trial('CoRelNet', 10_000, 0, 1)
    k = kernel_fit_trial('rbf', 4, 0, 256, 20, 5)
    assert 0 <= k['truncation_err'] <= 1 and 0 < k['sup_err'] < 10
    # the truncation term is that of the trial's own grid (5 x 5 points) at rank = width, not of some other matrix or rank
    assert k['truncation_err'] == pytest.approx(best_rank_sup_error(kernel_gram('rbf', grid_points(5)), 4), rel=1e-9)
    assert k['truncation_err'] != pytest.approx(best_rank_sup_error(kernel_gram('rbf', grid_points(5)), 3), rel=1e-3)


# --- the chapter's claims (relbook.evidence ledger) -------------------------------------------

def _order_rows(accs: dict, n_train=(256, 512), seeds=range(3), best_epoch=50.0):
    "Toy order_relation rows: accs[model] = per-seed test accuracies at the largest size (half of it at smaller ones)."
    import pandas as pd
    return pd.DataFrame([dict(model=m, n_train=n, seed=s, test_acc=a[s] if n == max(n_train) else a[s] / 2,
                              best_epoch=best_epoch, epochs=100)
                         for m, a in accs.items() for n in n_train for s in seeds])


def test_chapter_claims_are_declared():
    from relbook.evidence import CLAIMS
    from relbook.relations import RELATIONS_CLAIMS   # importing the module declares them
    ids = {c.id for c in CLAIMS.values() if c.chapter == '01_relations'}
    assert ids == {c.id for c in RELATIONS_CLAIMS}
    assert ids == {'mlp-inner-products-fit-rbf-kernel', 'mlp-inner-products-fit-polynomial-kernel',
                   'asymmetric-relation-represents-order', 'asymmetric-relation-learns-order',
                   'corelnet-cannot-learn-order', 'asymmetric-corelnet-learns-order'}


def test_order_claims_judge_toy_rows():
    from relbook.evidence import CLAIMS
    from relbook.relations import ORDER_MAJORITY
    assert math.isclose(ORDER_MAJORITY, 33 / 64)
    rows = _order_rows({'relation (asym)': [0.93, 0.94, 0.95], 'relation (sym)': [0.46, 0.48, 0.47],
                        'CoRelNet': [0.52, 0.51, 0.53], 'CoRelNet (asym)': [0.85, 0.88, 0.90]})
    ev = CLAIMS['asymmetric-relation-learns-order'].evaluate(rows)
    assert ev.comparison.verdict == 'supports the paper' and math.isclose(ev.comparison.effect, 0.47)
    assert len(ev.rows) == 6 and set(ev.rows.n_train) == {512}              # read at the largest size only
    unable = CLAIMS['corelnet-cannot-learn-order'].evaluate(rows).comparison  # within ±0.05 of 0.516
    assert unable.verdict == 'supports the paper' and unable.direction == 0
    learned = _order_rows({'CoRelNet': [0.75, 0.80, 0.78]})
    assert CLAIMS['corelnet-cannot-learn-order'].evaluate(learned).comparison.verdict == 'contradicts the paper'
    assert CLAIMS['asymmetric-corelnet-learns-order'].evaluate(rows).comparison.verdict == 'supports the paper'
    # smoke runs lack asymmetric CoRelNet, and have one seed: no crash, no verdict
    assert CLAIMS['asymmetric-corelnet-learns-order'].evaluate(learned).comparison is None
    one = _order_rows({'relation (asym)': [0.9], 'relation (sym)': [0.5]}, seeds=range(1))
    assert CLAIMS['asymmetric-relation-learns-order'].evaluate(one).comparison.verdict == 'insufficient data'


def test_kernel_claims_compare_smallest_and_largest_width():
    import pandas as pd
    from relbook.evidence import CLAIMS
    rows = pd.DataFrame([dict(kernel=k, width=w, seed=s, sup_err=(0.8 * (1.1, 1 / 1.1, 1)[s] if w == 1 else 0.5 if w == 8 else 0.1) * (1 + 0.01 * s))   # ratios 8.8, 7.3, 8: geometric mean 8
                         for k in ('rbf', 'poly2') for w in (1, 8, 64) for s in range(3)])
    ev = CLAIMS['mlp-inner-products-fit-rbf-kernel'].evaluate(rows)
    assert ev.comparison.verdict == 'supports the paper' and math.isclose(ev.comparison.effect, 8.0)   # 0.8 / 0.1
    assert set(ev.rows.width) == {1, 64}
    assert CLAIMS['mlp-inner-products-fit-polynomial-kernel'].evaluate(rows[rows.kernel == 'rbf']).comparison is None


def test_corelnet_relation_dimensions():
    "d_r relations, each with its own map, read out together; d_r=1 is the paper's CoRelNet, drawn from the same random numbers."
    torch.manual_seed(0); one = CoRelNet(8, 3, 2, softmax=False)
    torch.manual_seed(0); same = CoRelNet(8, 3, 2, softmax=False, d_r=1)
    assert all(torch.equal(a, b) for a, b in zip(one.state_dict().values(), same.state_dict().values()))
    net, x = CoRelNet(8, 3, 2, softmax=False, d_r=4), torch.randn(5, 3, 8)
    assert net.relation.d_r == 4 and net.head[0].in_features == 3 * 3 * 4 and net(x).shape == (5, 2)
    R = net.relation(x)                                                    # (b, 3, 3, 4): one symmetric matrix per relation
    assert R.shape == (5, 3, 3, 4) and torch.allclose(R, R.transpose(1, 2))
    assert CoRelNet(8, 3, 2, diagonal=False, d_r=2).head[0].in_features == 3 * 2 * 2
    with pytest.raises(ValueError, match='d_r'):
        CoRelNet(8, 3, 2, d_r=0)
