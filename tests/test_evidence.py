"""The evidence layer: verdict rule, convergence in result rows, provenance, and the committed claims page."""
import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn as nn

from relbook import evidence as ev
from relbook.core import provenance, source_hash
from relbook.harness import Classification, ResultsStore, TrainConfig, fit, run_sweep


# --- the rule --------------------------------------------------------------------------------

def test_null_false_verdict_rate_and_power():
    "Under no effect a verdict either way comes ~5 % of the time; a planted effect is found with the computed power."
    rng, reps, n = np.random.default_rng(123), 3000, 4
    null = [ev.compare(r, np.zeros(n)).verdict for r in rng.normal(0, 1, (reps, n))]
    false = 1 - null.count('inconclusive') / reps
    assert abs(false - 0.05) < 3 * math.sqrt(0.05 * 0.95 / reps), false
    p = ev.power(1.2, 1.0, 6)
    hit = [ev.compare(r, np.zeros(6)).verdict for r in rng.normal(1.2, 1.0, (reps, 6))].count('supports the paper') / reps
    assert abs(hit - p) < 3 * math.sqrt(p * (1 - p) / reps), (hit, p)


def test_direction_and_insufficient():
    a, b = [0.9, 0.91, 0.92], [0.5, 0.52, 0.49]
    assert ev.compare(a, b).verdict == 'supports the paper'
    assert ev.compare(a, b, direction=-1).verdict == 'contradicts the paper'
    assert ev.compare(a[:2], b[:2]).verdict == 'insufficient data'
    c = ev.compare(a[:1], b[:1])
    assert c.verdict == 'insufficient data' and math.isnan(c.lo)


def test_identical_results_are_inconclusive_not_a_verdict():
    c = ev.compare([1.0, 1.0, 1.0], [1.0, 1.0, 1.0])          # no spread, 3 seeds: too few for the sign test that decides ties
    assert (c.lo, c.hi, c.verdict) == (-math.inf, math.inf, 'inconclusive') and 'unbounded' in c.fmt()
    c = ev.compare([1.0] * 6, [1.0] * 6)                        # 6 seeds: the point interval [0, 0], still no effect
    assert (c.lo, c.hi, c.verdict) == (0.0, 0.0, 'inconclusive')


def test_tied_seeds_need_the_sign_test_not_a_point_interval():
    "Three seeds with one identical difference are not certainty (review: a point interval judged them 'supports')."
    assert ev.compare([0.51] * 3, [0.50] * 3, size=0.005).verdict == 'inconclusive'
    assert ev.compare([0.51] * 6, [0.50] * 6, size=0.005).verdict == 'supports the paper'
    assert ev.compare([0.6] * 3, [0.5] * 3, paired=False).verdict == 'inconclusive'       # permutation test, 3 vs 3: p = 0.1


def test_welch_unpaired():
    c = ev.compare([0.9, 0.8, 0.85, 0.88], [0.5, 0.6, 0.55], paired=False)
    assert c.method == 'Welch t' and c.verdict == 'supports the paper'


@pytest.mark.parametrize('kw, msg', [
    (dict(a=[1, 2, float('inf')], b=[1, 2, 3]), 'a must be finite'),
    (dict(a=[1, 2, 3], b=[1, 2, 3], level=1.5), 'level must lie in'),
    (dict(a=[1, 2, 3], b=[1, 2, 3], direction=1, margin=0.1, size=0.2), 'excludes size'),
    (dict(a=[1, 2, 3], b=[1, 2, 3], direction=-1, margin=-0.1), 'must be a positive number'),
    (dict(a=[1, 2, 3], b=[0, 2, 3], ratio=True), 'positive values'),
    (dict(a=pd.Series([1., 2, 3], index=[4, 5, 6]), b=[1, 2, 3]), 'same seeds'),
])
def test_bad_arguments(kw, msg):
    with pytest.raises(ValueError, match=msg): ev.compare(**kw)


# --- convergence, provenance ------------------------------------------------------------------

def _blobs(n, seed):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    return torch.randn(n, 2, generator=g) + 2 * y[:, None].float(), y


def test_sweep_rows_record_convergence_and_source(tmp_path):
    def trial(seed):
        net = nn.Linear(2, 2)
        fit(net, Classification(), _blobs(128, seed), _blobs(64, 99), TrainConfig(lr=0.05, max_epochs=5), progress=False)
        return {'acc': 1.0}
    df = run_sweep('conv', [{'seed': 0}, {'seed': 1}], trial, store=ResultsStore(tmp_path / 'c.jsonl'), progress=False)
    assert (df.fit_max_steps == 10).all() and (df.n_fits == 1).all()
    assert set(df.source_sha) == {source_hash()}
    assert all(ev.convergence(r) in ('converged', 'still improving') for r in df.to_dict('records'))


def test_provenance_hash_changes_with_source(tmp_path):
    (tmp_path / 'a.py').write_text('x = 1\n')
    h1 = source_hash(tmp_path)
    (tmp_path / 'a.py').write_text('x = 2\n')
    assert source_hash(tmp_path) != h1 and len(h1) == 12
    assert 'source_sha' in provenance()


# --- the ledger and the committed claims page --------------------------------------------------

def test_every_claim_is_well_formed():
    claims = ev.load_all_claims()
    assert len(claims) >= 25, f"only {len(claims)} claims declared"
    import relbook.harness as h
    for c in claims.values():
        assert c.paper in ev.PAPERS
        assert all(e in h.EXPERIMENTS for e in c.experiments), (c.id, c.experiments)
        assert c.section, f"claim {c.id} names no section to link to"


def test_claim_sections_exist_in_their_chapters():
    "The claims page links each claim to a heading of its chapter: every heading must exist."
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    for c in ev.load_all_claims().values():
        nb = json.loads((root / 'nbs' / f'{c.chapter}.ipynb').read_text(encoding='utf-8'))
        heads = {line.lstrip('#').strip() for cell in nb['cells'] if cell['cell_type'] == 'markdown'
                 for line in ''.join(cell['source']).splitlines() if line.startswith('#')}
        assert c.section in heads, f"claim {c.id}: no heading {c.section!r} in {c.chapter}"


def test_committed_claims_page_matches_the_results(monkeypatch):
    "Rebuild the claims page, its data, the landing page's scoreboard and the GPU runbook from the committed stores: they must match."
    monkeypatch.delenv('RELBOOK_RESULTS', raising=False)      # the repository's results/, not the test's private folder
    stale = ev.write_claims(check=True)
    assert not stale, f"out of date: {stale}; run `relbook claims` and commit"


def test_rows_of_a_changed_protocol_judge_nothing(monkeypatch):
    """A protocol change that alters a trial's parameters leaves the old rows in the store: the claim must judge the current
    grid's rows only (`current_rows`), never average the two protocols, and count as unjudged until the new grid has run."""
    import relbook.harness as h
    monkeypatch.setitem(h.EXPERIMENTS, 'toy_protocol', None)
    version = {'v': 1}
    def toy():
        trials = [dict(seed=s, **({'protocol': version['v']} if version['v'] > 1 else {})) for s in range(4)]
        return run_sweep('toy_protocol', trials, lambda seed, protocol=1: {'a': 0.5 + 0.3 * (protocol > 1) + 0.01 * seed, 'b': 0.6},
                         progress=False)
    monkeypatch.setitem(h.EXPERIMENTS, 'toy_protocol', toy)
    def evaluate(df):
        if df.empty: return ev.Evidence(None, 'no rows', df)
        return ev.Evidence(ev.compare(df.set_index('seed').a, df.set_index('seed').b), f'a {df.a.mean():.2f}', df,
                           convergence_keys=False)
    c = ev.Claim(id='toy-a-beats-b', chapter='96_evidence', paper='altabaa2024disentangling', where='-', claim='a > b',
                 experiments=('toy_protocol',), metric='a', comparison='a - b', evaluate=evaluate)
    h.run_experiment('toy_protocol', 'smoke')                                        # protocol 1: a < b on every seed
    j1 = ev.judge(c, 'smoke')
    assert j1.verdict == 'contradicts the paper' and j1.trials == 4
    version['v'] = 2                                                                  # the protocol changes the trials' keys
    assert ev.current_rows('toy_protocol', 'smoke').empty and len(h.store_for('toy_protocol', 'smoke').rows()) == 4
    assert ev.judge(c, 'smoke').verdict == 'not run'                                  # the old rows judge nothing
    h.run_experiment('toy_protocol', 'smoke')                                        # protocol 2: a > b on every seed
    j2 = ev.judge(c, 'smoke')
    assert j2.verdict == 'supports the paper' and j2.trials == 4, (j2.verdict, j2.trials)   # not 8 rows of two protocols
    assert len(h.store_for('toy_protocol', 'smoke').rows()) == 8                      # the history stays in the store


def test_bad_arguments_of_the_rule_are_refused_by_name():
    "NaN in is never a number out: a NaN tail never marks a trial converged, a non-positive sd has no power, an inf budget is no budget."
    from relbook.campaign import parse_budget
    for tail in (math.nan, 5, 0, True):
        with pytest.raises(ValueError, match='tail must be a fraction'): ev.convergence({'best_step': 1, 'max_steps': 2}, tail=tail)
    for sd in (-1.0, 0.0):
        with pytest.raises(ValueError, match='sd must be a positive'): ev.power(0.5, sd, 5)
    with pytest.raises(ValueError, match='effect must be a finite'): ev.seeds_for_power(math.nan, 1.0)
    with pytest.raises(ValueError, match='budget must be a positive finite'): parse_budget(math.inf)


def test_the_claims_page_names_the_commits_of_a_verdicts_rows():
    "The evidence column says which commits the rows were made at (one: 'commit', several: 'commits'; none: nothing)."
    from relbook.evidence import _run_cell
    base = dict(profile='gpu', devices='NVIDIA H100, cpu', seeds=5, trials=40, still_improving=0, unknown_convergence=0,
                dirty_rows=0, pending='')
    assert _run_cell({**base, 'commits': '420c0c6, 47f2cef'}) == '`gpu`; NVIDIA H100, cpu; commits 420c0c6, 47f2cef; 5 seeds, 40 trials'
    assert '; commit f6eae84; ' in _run_cell({**base, 'commits': 'f6eae84'})
    assert 'commit' not in _run_cell({**base, 'commits': ''}) and 'commit' not in _run_cell({**base, 'commits': None})
