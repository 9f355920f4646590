"""A trial cut off by a time budget and resumed later (a campaign's next command, or another machine) reports the wall time
of every process that worked on it, not only the last one's: the runbook's measured cost sums these rows."""
import time

import pytest
import torch
import torch.nn as nn

import relbook.harness as H


class Slow(H.Classification):
    def loss(self, model, batch):
        time.sleep(0.01)
        return super().loss(model, batch)


def _data(n):
    g = torch.Generator().manual_seed(n)
    return torch.randn(n, 8, generator=g), torch.randint(0, 2, (n,), generator=g)


CFG = H.TrainConfig(lr=3e-3, batch_size=32, max_steps=60, checkpoint_secs=0.0)
OUTSIDE = 0.2      # seconds a trial spends outside its fit (data, evaluation): part of its wall time too


def _trial(seed):
    time.sleep(OUTSIDE)
    torch.manual_seed(seed)
    H.fit(nn.Linear(8, 2), Slow(), _data(100), None, CFG, progress=False)
    return {'acc': 1.0}


def test_a_resumed_trial_reports_every_run_of_it(tmp_path):
    store = H.ResultsStore(tmp_path / 'x-quick.jsonl')
    with H.time_budget(0.5), pytest.raises(H.BudgetExhausted):
        H.run_sweep('x', [{'seed': 0}], _trial, store=store, progress=False)
    ck = next((tmp_path / 'checkpoints' / 'x-quick').glob('*.pt'))
    first = torch.load(ck, weights_only=False)['trial_elapsed_s']
    assert first >= OUTSIDE + 0.1, first                 # the sleep before the fit and some steps, up to the deadline
    t0 = time.perf_counter()
    H.run_sweep('x', [{'seed': 0}], _trial, store=store, progress=False)
    second = time.perf_counter() - t0
    (row,) = store.rows()
    assert row['wall_time_prior_s'] == pytest.approx(first, abs=1e-3)
    assert first + OUTSIDE <= row['wall_time_s'] <= first + second + 1e-3
    assert not ck.exists()


def test_a_trial_run_once_has_no_prior_time(tmp_path):
    store = H.ResultsStore(tmp_path / 'x-quick.jsonl')
    t0 = time.perf_counter()
    H.run_sweep('x', [{'seed': 0}], _trial, store=store, progress=False)
    (row,) = store.rows()
    assert 'wall_time_prior_s' not in row and OUTSIDE <= row['wall_time_s'] <= time.perf_counter() - t0


def test_a_fit_outside_a_trial_keeps_no_trial_time(tmp_path):
    "A fit given its own checkpoint path, outside a sweep, writes no trial clock and resumes as before."
    ck = tmp_path / 'c.pt'
    with H.time_budget(0.2), pytest.raises(H.BudgetExhausted):
        H.fit(nn.Linear(8, 2), Slow(), _data(100), None, CFG, progress=False, checkpoint=ck)
    assert 'trial_elapsed_s' not in torch.load(ck, weights_only=False)
    assert H.fit(nn.Linear(8, 2), Slow(), _data(100), None, CFG, progress=False, checkpoint=ck).steps == 60
