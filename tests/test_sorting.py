"""Chapter 5 (object sorting): the claims ledger — budgets and convergence, sizes to reach 0.9, robustness relative to clean accuracy."""
import math
import pandas as pd
import pytest
import relbook.sorting as so
from relbook.evidence import CLAIMS, convergence


def _curves(models, seeds=range(3), sizes=(250, 500, 1000, 2000), acc=lambda m, s, n: 0.5, best=20.0, epochs=40.0):
    "Synthetic object_sorting rows (quick profile: 40-epoch budget)."
    return pd.DataFrame([dict(model=m, seed=s, n_train=n, ar_seq_acc=acc(m, s, n), acc=acc(m, s, n),
                              best_epoch=best, epochs=epochs, profile='quick')
                         for m in models for s in seeds for n in sizes])


def _robust_rows(shares, seeds=range(3)):
    "Synthetic sorting_robustness rows: clean accuracy c, accuracy c·share(σ) under additive noise, 0 under linear maps."
    rows = []
    for m, (clean, share) in shares.items():
        for s in seeds:
            r = dict(model=m, seed=s, clean_ar_seq_acc=clean, best_epoch=40.0, epochs=40.0, profile='quick')
            for kind, levels in so.ROBUST_LEVELS.items():
                for sigma in levels:
                    kept = 1.0 if sigma == 0 else (share(sigma) if kind == 'additive' else 0.0)
                    r[f'{kind}|{sigma}|ar_seq_acc'] = clean * kept
                    r[f'{kind}|{sigma}|ar_acc'] = 0.1 if kind == 'linear' else 0.5
            rows.append(r)
    return pd.DataFrame(rows)


def test_ledger_declares_seven_claims_under_the_chapter_headings():
    ours = {k: c for k, c in CLAIMS.items() if c.chapter == '05_object_sorting'}
    assert len(ours) == 7
    assert {c.section for c in ours.values()} == {so.SECTION_5A, so.SECTION_5B, so.SECTION_8}


def test_budget_comes_from_the_protocol_not_from_the_epochs_run():
    rows = _curves(['Abstractor'], seeds=[0], sizes=[250], best=26.0, epochs=36.0)   # patience stopped it at 36 of 40
    b = so.with_budget(rows)
    assert b.budget_epochs.tolist() == [40] and b.stopped_early.tolist() == [True]
    assert convergence(b.iloc[0], *so.CONVERGENCE) == 'converged'
    late = so.with_budget(_curves(['Abstractor'], seeds=[0], sizes=[250], best=38.0, epochs=40.0))
    assert convergence(late.iloc[0], *so.CONVERGENCE) == 'still improving'


def test_sample_efficiency_claim_uses_full_sequence_accuracy():
    rows = _curves(['Abstractor', 'Transformer'], acc=lambda m, s, n: (0.6 if m == 'Abstractor' else 0.2) + 0.01 * s)
    rows['acc'] = 0.9                                         # per element identical: must not decide the verdict
    ev = CLAIMS['sorting-abstractor-vs-transformer'].evaluate(rows)
    assert ev.comparison.effect == pytest.approx(0.4) and ev.comparison.verdict == 'supports the paper'
    assert 'per element' in ev.note


def test_sizes_to_reach_and_the_censoring_rule():
    curve = {250: 0.0, 500: 0.5, 1000: 0.95, 2000: 1.0}
    rows = _curves(['Abstractor', 'Transformer'], acc=lambda m, s, n: curve[n] if m == 'Abstractor' else 0.0)
    ev = CLAIMS['sorting-data-ratio'].evaluate(rows)
    n90 = 500 * 2 ** ((0.9 - 0.5) / 0.45)                     # log-interpolated between 500 and 1000
    assert ev.comparison.effect == pytest.approx(4000 / n90)  # the Transformer never reaches 0.9: twice the largest size
    assert 'censored seeds: Transformer 3, Abstractor 0' in ev.note


def test_robustness_is_judged_relative_to_clean_accuracy():
    # same share kept at every σ, different clean accuracy: not more robust
    rows = _robust_rows({'Abstractor': (0.95, lambda s: 0.5 / (1 + s)), 'Transformer': (0.80, lambda s: 0.5 / (1 + s))})
    c = CLAIMS['sorting-robust-additive'].evaluate(rows).comparison
    assert c.effect == pytest.approx(0.0, abs=1e-12)
    kept = so.retained(rows, 'additive')
    assert list(kept.columns) == [0.1, 0.25, 0.5, 1.0, 2.0] and kept.loc[('Transformer', 0), 0.1] == pytest.approx(0.5 / 1.1)
    # both at 0 per sequence and at chance per element under linear maps: said to be no evidence
    ev = CLAIMS['sorting-robust-linear'].evaluate(rows)
    assert 'not evidence' in ev.note


def test_claims_do_not_crash_on_smoke_rows():
    rows = _curves(list(so.SORTING_VARIANTS), seeds=[0], sizes=(100, 300), acc=lambda m, s, n: 0.0)
    rob = _robust_rows({'Abstractor': (0.0, lambda s: 0.0), 'Transformer': (0.0, lambda s: 0.0)}, seeds=[0])
    for c in (c for c in CLAIMS.values() if c.chapter == '05_object_sorting'):
        ev = c.evaluate(rob if c.experiments == ('sorting_robustness',) else rows)
        assert ev.comparison.verdict == 'insufficient data'
