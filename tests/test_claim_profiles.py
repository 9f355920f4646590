"""Each claim's `profiles` (the only profiles whose rows can judge it) agrees with what each profile's trial grid can judge.

A campaign at `gpu` skips the claims whose `profiles` leave `gpu` out, and the claims page says which rows could judge a claim
that has none. A wrong declaration misleads both: on 2026-11-27 the campaign ranked `dat_math` second among the `gpu` runs
for `dat-math-vs-transformer-plus`, a claim about Transformer+, which only the `full` protocol trains. The probe: for every
trial of a profile's grid (`intercept`, nothing trained), a stand-in row made of the trial's parameters and the metrics of
the committed row most like it (quick, else full or gpu), its numbers shaken by 5 % so that paired comparisons have a spread;
the claim's own `evaluate` then either makes a comparison from those rows or does not.
"""
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from relbook.campaign import intercept
from relbook.evidence import load_all_claims
from relbook.harness import ResultsStore

ROOT = Path(__file__).resolve().parents[1]
JUDGED = ('quick', 'gpu', 'full')       # the profiles the claims page judges from (smoke rows never reach it)
# the CIFAR claim's grid depends on $RELBOOK_CIFAR (the data are not on this machine): no profile judges it here
ENVIRONMENT = {'dat-vision-cifar'}


@lru_cache(maxsize=None)
def _template_rows(exp: str) -> tuple:
    for p in ('quick', 'full', 'gpu'):
        rows = ResultsStore(ROOT / 'results' / f'{exp}-{p}.jsonl').rows()
        if rows: return tuple(rows)
    return ()


@lru_cache(maxsize=None)
def _stand_in(exp: str, profile: str) -> pd.DataFrame | None:
    src, rng = _template_rows(exp), np.random.default_rng(0)
    if not src: return None
    out = []
    for t in intercept(exp, profile)[0]:
        like = max(src, key=lambda r: sum(r['params'].get(k) == v for k, v in t.items()))
        row = {k: (v * (1 + 0.05 * rng.standard_normal()) if isinstance(v, float) and np.isfinite(v) else v)
               for k, v in like.items() if k != 'params'}
        out.append({**row, **t, 'profile': profile})
    return pd.DataFrame(out)


def _judgeable(c, profile: str) -> bool:
    frames = [_stand_in(e, profile) for e in c.experiments]
    if any(f is None for f in frames): pytest.skip(f'{c.id}: no committed rows to model stand-ins on')
    ev = c.evaluate(pd.concat(frames, ignore_index=True))
    return ev.comparison is not None and not ev.rows.empty


@pytest.mark.filterwarnings('ignore')
@pytest.mark.parametrize('cid', sorted(set(load_all_claims()) - ENVIRONMENT))
def test_declared_profiles_are_those_whose_grid_can_judge_the_claim(cid):
    c = load_all_claims()[cid]
    can = tuple(p for p in JUDGED if _judgeable(c, p))
    assert can, f"{cid}: no profile's grid can judge it"
    declared = tuple(p for p in JUDGED if not c.profiles or p in c.profiles)
    assert declared == can, (f"{cid}: declared profiles={c.profiles or '()'} (judged at {declared}), but the grids of "
                             f"{can} can judge it: declare profiles={can if len(can) < len(JUDGED) else '()'}")


@pytest.mark.filterwarnings('ignore')
def test_the_probe_tells_a_grid_that_cannot_judge():
    "The probe is not vacuous: with the quick grid's Transformer+ rows added (which no quick trial makes), the claim about it can be judged."
    c = load_all_claims()['dat-math-vs-transformer-plus']
    assert not _judgeable(c, 'quick') and _judgeable(c, 'full')
    quick = _stand_in('dat_math', 'quick')
    plus = quick[quick.model == 'Transformer'].assign(model='Transformer+')
    assert c.evaluate(pd.concat([quick, plus], ignore_index=True)).comparison is not None
