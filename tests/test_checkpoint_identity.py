"""A checkpoint is resumed only by the fit that wrote it.

A trial's fits share one checkpoint path (chapter 5's pre-training, then fine-tuning). If a trial is interrupted while
pre-training and, before it resumes, another worker caches the shared pre-trained model, the resumed trial skips its
pre-training and its fine-tuning fit finds the pre-training's checkpoint: it must not continue from that state.
"""
import warnings

import pytest
import torch
import torch.nn as nn

import relbook.harness as H


def _data(n):
    g = torch.Generator().manual_seed(n)
    return torch.randn(n, 8, generator=g), torch.randint(0, 2, (n,), generator=g)


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 2))


CFG = H.TrainConfig(lr=3e-3, batch_size=32, max_steps=30)


def _interrupted(monkeypatch, ck, n):
    "A fit on `n` items stopped by its deadline after one step, its state checkpointed at `ck`."
    monkeypatch.setenv('RELBOOK_DEADLINE', '1')
    with pytest.raises(H.BudgetExhausted): H.fit(_net(), H.Classification(), _data(n), None, CFG, progress=False, checkpoint=ck)
    monkeypatch.delenv('RELBOOK_DEADLINE')
    assert torch.load(ck, weights_only=False)['step'] == 1


def test_a_fit_starts_afresh_over_another_fits_checkpoint(monkeypatch, tmp_path):
    ck = tmp_path / 'trial.pt'
    _interrupted(monkeypatch, ck, 200)                    # "pre-training" on 200 items
    clean, reference = _net(), _net()
    H.fit(reference, H.Classification(), _data(100), None, CFG, progress=False, checkpoint=None)
    with pytest.warns(UserWarning, match="holds another fit's state"):
        res = H.fit(clean, H.Classification(), _data(100), None, CFG, progress=False, checkpoint=ck)
    assert res.steps == 30 and not ck.exists()
    assert all(torch.equal(a, b) for a, b in zip(clean.parameters(), reference.parameters()))   # as if no checkpoint were there


def test_a_fit_resumes_its_own_checkpoint(monkeypatch, tmp_path):
    ck = tmp_path / 'trial.pt'
    _interrupted(monkeypatch, ck, 100)
    resumed, whole = _net(), _net()
    with warnings.catch_warnings():
        warnings.simplefilter('error')                    # no warning: its own state
        res = H.fit(resumed, H.Classification(), _data(100), None, CFG, progress=False, checkpoint=ck)
    H.fit(whole, H.Classification(), _data(100), None, CFG, progress=False, checkpoint=None)
    assert res.steps == 30
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(resumed.parameters(), whole.parameters()))


def test_an_older_checkpoint_without_an_id_is_still_resumed(monkeypatch, tmp_path):
    ck = tmp_path / 'trial.pt'
    _interrupted(monkeypatch, ck, 100)
    saved = torch.load(ck, weights_only=False); del saved['fit_id']; torch.save(saved, ck)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert H.fit(_net(), H.Classification(), _data(100), None, CFG, progress=False, checkpoint=ck).steps == 30


def test_the_id_ignores_what_changes_no_step():
    from dataclasses import replace
    net, data = _net(), _data(100)
    a = H._fit_id(net, data, CFG)
    assert a == H._fit_id(net, data, replace(CFG, checkpoint_secs=5.0, eval_batch_size=7))
    assert a != H._fit_id(net, data, replace(CFG, lr=1e-3))
    assert a != H._fit_id(net, _data(101), CFG)


class _Noisy(H.Classification):
    "A task with its own random draws (as an augmentation): its generator must travel in the checkpoint."
    def __init__(self): self.gen = torch.Generator().manual_seed(5)
    def loss(self, model, batch):
        x, y = batch
        return super().loss(model, (x + 0.5 * torch.randn(x.shape, generator=self.gen), y))
    def state_dict(self): return {'gen': self.gen.get_state()}
    def load_state_dict(self, s): self.gen.set_state(s['gen'])


def test_a_resumed_fit_continues_its_tasks_draws(monkeypatch, tmp_path):
    "The task's augmentation generator is checkpointed: the resumed fit equals the uninterrupted one (it restarted the draws)."
    ck = tmp_path / 'trial.pt'
    monkeypatch.setenv('RELBOOK_DEADLINE', '1')
    with pytest.raises(H.BudgetExhausted): H.fit(_net(), _Noisy(), _data(100), None, CFG, progress=False, checkpoint=ck)
    monkeypatch.delenv('RELBOOK_DEADLINE')
    assert 'task' in torch.load(ck, weights_only=False)
    resumed, whole = _net(), _net()
    H.fit(resumed, _Noisy(), _data(100), None, CFG, progress=False, checkpoint=ck)
    H.fit(whole, _Noisy(), _data(100), None, CFG, progress=False, checkpoint=None)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(resumed.parameters(), whole.parameters()))


def test_a_fit_resumed_while_start_from_waits_ends_as_the_whole_fit(monkeypatch, tmp_path):
    """`start_from` counts the evaluations in the fit's history, which the checkpoint keeps: a fit interrupted after an
    evaluation that did not count ends, resumed, where the uninterrupted fit ends (same best model, same stop)."""
    cfg = H.TrainConfig(lr=3e-3, batch_size=32, max_steps=60, eval_every=1, monitor='acc', mode='max', patience=3, start_from=5)
    ck, val = tmp_path / 'trial.pt', _data(64)
    monkeypatch.setenv('RELBOOK_DEADLINE', '1')
    with pytest.raises(H.BudgetExhausted): H.fit(_net(), H.Classification(), _data(100), val, cfg, progress=False, checkpoint=ck)
    monkeypatch.delenv('RELBOOK_DEADLINE')
    saved = torch.load(ck, weights_only=False)
    assert saved['step'] == 1 and len(saved['history']) == 1 and saved['best_state'] is None   # an uncounted evaluation
    resumed, whole = _net(), _net()
    res = H.fit(resumed, H.Classification(), _data(100), val, cfg, progress=False, checkpoint=ck)
    ref = H.fit(whole, H.Classification(), _data(100), val, cfg, progress=False, checkpoint=None)
    assert (res.best_step, res.steps, res.stopped_early) == (ref.best_step, ref.steps, ref.stopped_early)
    assert res.best_step > cfg.start_from and [h['val_acc'] for h in res.history] == [h['val_acc'] for h in ref.history]
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(resumed.parameters(), whole.parameters()))
