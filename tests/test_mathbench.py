"Tests of the mathematics benchmark's analysis tools (relbook.mathbench)."
import numpy as np
import pytest
from relbook.mathbench import fraction_roles, value_probe, register_math_model, math_model, MATH_MODELS


def test_fraction_roles():
    lab = fraction_roles('What is (-12)/3 + 7/(-45)?')
    s = ''.join({'num': 'n', 'den': 'd', None: '.'}[l] for l in lab)
    assert s == '..........nn..d...n...dd..'
    assert fraction_roles('1/2/3') == ['num', None, None, None, 'den']   # 2 is both: unlabelled


def test_value_probe():
    rng = np.random.default_rng(0)
    S = rng.normal(size=(300, 4))
    V = np.stack([S @ rng.normal(size=(4, 4)) + 1.0, rng.normal(size=(300, 4))], 1)
    out = value_probe(V, S)
    assert out['mse_head0'] < 1e-20 and out['mse_head1'] > 0.5 * out['var']
    with pytest.raises(ValueError, match="values must be"): value_probe(V[:, 0], S)
    with pytest.raises(ValueError, match="values must hold N >= 2"): value_probe(V[:4], S[:4])        # 2 fitting rows, 5 parameters
    with pytest.raises(ValueError, match="values must hold N >= 2"): value_probe(V[:1], S[:1])        # an empty fit
    bad = V.copy(); bad[3, 0, 1] = np.nan
    with pytest.raises(ValueError, match="values must be finite"): value_probe(bad, S)


def test_registry():
    assert {'Transformer', 'Transformer+', 'Abstractor (d)', 'TP-Transformer', 'TP-Transformer (no roles)'} <= set(MATH_MODELS)
    with pytest.raises(ValueError, match="build must be callable"): register_math_model('x', 3)
    with pytest.raises(ValueError, match="name must be one of"): math_model('GPT')


# --- the chapter's claims ---------------------------------------------------------------------
import math
import pandas as pd
from relbook.evidence import CLAIMS, convergence
from relbook.mathbench import curve_budget, MATH_CONVERGENCE


def test_curve_budget_reads_the_budget_off_the_curve():
    rows = pd.DataFrame([
        dict(best_step=800, curve=[[100, .5], [800, .6], [900, .6], [1000, .55]]),          # steps; a tie keeps the first best
        dict(best_step=390, curve=[[3.0, .1], [39.0, .97], [60.0, .95]]),                    # epochs: 10 steps per epoch
        dict(best_step=0, curve=[[1, .1]]), dict(best_step=5, curve=None)])                 # nothing to read: unknown
    b = curve_budget(rows)['budget_steps'].tolist()
    assert b[:2] == [1000.0, 600.0] and all(math.isnan(v) for v in b[2:])
    lm = pd.DataFrame([dict(best_step=550, curve=[[51200, 5.3, 6.6], [563200, 3.93, 3.8], [614400, 3.94, 3.7]])])
    assert curve_budget(lm, 'min')['budget_steps'].tolist() == [600.0]                      # tokens, lower is better
    assert [convergence(r, *MATH_CONVERGENCE) for r in curve_budget(lm, 'min').to_dict('records')] == ['still improving']
    with pytest.raises(ValueError, match='mode must be one of'): curve_budget(lm, 'best')


def _rows(seeds, acc, ex=0.01):
    "Toy benchmark rows: every model on two modules; `acc(model, seed)` gives the test accuracy."
    return pd.DataFrame([dict(model=m, module=mod, seed=s, acc=acc(m, s), ar_seq_acc=ex, best_step=500,
                              curve=[[500, .5], [1000, .4]]) for m in MATH_MODELS for mod in ('algebra__linear_1d', 'polynomials__add')
                         for s in range(seeds)])


def test_claims_are_declared_and_judged_by_the_rule():
    ids = {'abstractor-math-vs-transformer', 'abstractor-math-vs-transformer-plus', 'tp-math-roles-help'}
    assert ids <= {k for k, c in CLAIMS.items() if c.chapter == '07_math_benchmark'}
    better = lambda m, s: 0.5 + (0.05 + 0.004 * (-1) ** s) * (m == 'Abstractor (d)') + 0.01 * s   # a spread over seeds
    ev = CLAIMS['abstractor-math-vs-transformer'].evaluate(_rows(4, better))
    assert ev.comparison.verdict == 'supports the paper' and math.isclose(ev.comparison.effect, 0.05)
    assert CLAIMS['abstractor-math-vs-transformer-plus'].evaluate(_rows(1, better)).comparison.verdict == 'insufficient data'
    # the rows the verdict rests on carry a budget, so convergence is known (best step 500 of 1000: converged)
    assert {convergence(r, *ev.convergence_keys) for r in ev.rows.to_dict('records')} == {'converged'}
    # §4.3's claim is judged on §4.3's tasks: a module outside them (arithmetic__mixed) does not enter the comparison
    rows = _rows(4, better)
    other = rows[rows.module == 'polynomials__add'].assign(module='arithmetic__mixed', acc=lambda d: 1 - d.acc)
    ev2 = CLAIMS['abstractor-math-vs-transformer'].evaluate(pd.concat([rows, other]))
    assert math.isclose(ev2.comparison.effect, 0.05) and set(ev2.rows.module) <= set(rows.module)


def test_tp_claim_notes_a_floor_of_whole_answer_accuracy():
    ev = CLAIMS['tp-math-roles-help'].evaluate(_rows(3, lambda m, s: 0.4, ex=0.004))
    assert ev.comparison.verdict == 'inconclusive' and ev.note.startswith('floor effect')
    assert CLAIMS['tp-math-roles-help'].evaluate(_rows(3, lambda m, s: 0.4, ex=0.3)).note == ''
