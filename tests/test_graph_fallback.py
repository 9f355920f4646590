"""`fit`'s CUDA-graph path when a capture fails, checked on the CPU with a stand-in for the captured step.

On an H100 (torch 2.11) the first capture in a process failed ("operation would make the legacy stream depend on a
capturing blocking stream") where later captures in the same process succeeded. `fit` retries a failed capture once,
and after a second failure trains the rest of the fit eagerly with a `GraphFallback` warning; a failed capture ran
nothing, so the weights are those of an eager fit. `tests/test_cuda.py` turns `GraphFallback` into an error: its graph
tests fail rather than compare eager with eager.
"""
import contextlib
import warnings

import pytest
import torch
import torch.nn as nn

import relbook.harness as H


def _data():
    g = torch.Generator().manual_seed(0)
    return torch.randn(200, 8, generator=g), torch.randint(0, 2, (200,), generator=g)


class _Stub:
    "Stands in for `_GraphedStep`: capture fails the first `fail` times; a replay is the eager step on the same buffers."
    made, failed, replays = 0, 0, 0
    fail = 0

    def __init__(self, model, task, opt, cfg, device, batch, ranges):
        if _Stub.failed < _Stub.fail:
            _Stub.failed += 1
            raise torch.AcceleratorError('CUDA error: operation would make the legacy stream depend on a capturing blocking stream')
        _Stub.made += 1
        self.model, self.task, self.opt, self.cfg, self.shape = model, task, opt, cfg, [t.shape for t in batch]

    def fits(self, batch): return [t.shape for t in batch] == self.shape

    def __call__(self, batch):
        _Stub.replays += 1
        loss = H._forward_backward(self.model, self.task, batch, self.opt, contextlib.nullcontext(), set_to_none=False)
        H._update(self.model, self.opt, self.cfg)           # what the captured step runs after the backward pass
        return loss.detach()


def _run(monkeypatch, graphs: bool, fail: int = 0, max_steps: int = 20, checkpoint=None):
    "One fit of a small model, graphs asked for or not (the stub stands in for the graph): its FitResult, weights, warnings."
    monkeypatch.setenv('RELBOOK_CUDA_GRAPHS', '1' if graphs else '0')
    monkeypatch.setattr(H, 'graph_refusal', lambda task, cfg, device: None)        # the CPU stands in for the GPU
    monkeypatch.setattr(H, '_GraphedStep', _Stub)
    _Stub.made = _Stub.failed = _Stub.replays = 0; _Stub.fail = fail
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 2))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        res = H.fit(net, H.Classification(), _data(), None, H.TrainConfig(lr=3e-3, batch_size=64, max_steps=max_steps),
                    progress=False, checkpoint=checkpoint)
    return res, [p.detach().clone() for p in net.parameters()], [x for x in w if 'CUDA graph' in str(x.message)]


def _fit(monkeypatch, graphs: bool, fail: int = 0):
    return _run(monkeypatch, graphs, fail)[1:]


def test_a_failed_capture_is_retried_once(monkeypatch):
    eager, _ = _fit(monkeypatch, graphs=False)
    weights, warned = _fit(monkeypatch, graphs=True, fail=1)
    assert (_Stub.failed, _Stub.made) == (1, 1)
    assert _Stub.replays == 14                       # 20 steps: step 0 eager, 4 epochs' last batches (8 items) eager
    assert len(warned) == 1 and 'capturing once more' in str(warned[0].message)
    assert not issubclass(warned[0].category, H.GraphFallback)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(weights, eager))   # the stand-in replays the eager step


def test_twice_failed_capture_trains_eagerly_and_says_so(monkeypatch):
    eager, _ = _fit(monkeypatch, graphs=False)
    weights, warned = _fit(monkeypatch, graphs=True, fail=2)
    assert (_Stub.failed, _Stub.made, _Stub.replays) == (2, 0, 0)
    assert [x.category for x in warned][-1] is H.GraphFallback and 'trains eagerly' in str(warned[-1].message)
    assert 'legacy stream' in str(warned[-1].message)
    assert all(torch.equal(a, b) for a, b in zip(weights, eager))      # no capture attempt changed the training


def _graph_fit(monkeypatch, fail=0, max_steps=20, checkpoint=None):
    "One fit of the stand-in model with graphs requested (the stub replays the eager step); its FitResult."
    return _run(monkeypatch, True, fail, max_steps, checkpoint)[0]


def test_a_fit_counts_the_steps_a_graph_replayed(monkeypatch):
    assert _graph_fit(monkeypatch).graphed_steps == _Stub.replays == 14      # the rest: step 0 and the epochs' last batches
    assert _graph_fit(monkeypatch, fail=2).graphed_steps == 0                 # fell back: every step eager
    monkeypatch.setattr(H, 'graph_refusal', lambda task, cfg, device: 'refused')
    monkeypatch.setenv('RELBOOK_CUDA_GRAPHS', '1')
    net = nn.Sequential(nn.Linear(8, 2))
    assert H.fit(net, H.Classification(), _data(), None, H.TrainConfig(max_steps=5), progress=False, checkpoint=None).graphed_steps == 0


def test_rows_record_how_many_updates_a_graph_replayed(monkeypatch, tmp_path):
    def trial(seed):
        r = _graph_fit(monkeypatch)
        return {'steps': r.steps}
    df = H.run_sweep('g', [{'seed': 0}], trial, store=H.ResultsStore(tmp_path / 'g.jsonl'), progress=False)
    assert df['graphed_steps'].tolist() == [14] and df['steps'].tolist() == [20]
    df = H.run_sweep('e', [{'seed': 0}], lambda seed: {'steps': _run(monkeypatch, graphs=False)[0].steps},   # flag off:
                     store=H.ResultsStore(tmp_path / 'e.jsonl'), progress=False)                             # no field at all
    assert 'graphed_steps' not in df.columns


def test_a_fit_resumed_from_an_uncounted_checkpoint_says_its_count_is_unknown(monkeypatch, tmp_path):
    ck = tmp_path / 'c.pt'
    monkeypatch.setenv('RELBOOK_DEADLINE', '1')                  # long past: the fit stops after its first step, checkpointed
    with pytest.raises(H.BudgetExhausted): _graph_fit(monkeypatch, max_steps=40, checkpoint=ck)
    monkeypatch.delenv('RELBOOK_DEADLINE')
    saved = torch.load(ck, weights_only=False); assert saved['graphed'] == 0 and saved['step'] == 1
    # resumed, it counts as the uninterrupted fit does: 40 updates less step 0 and the 10 epochs' last (8-item) batches
    assert _graph_fit(monkeypatch, max_steps=40, checkpoint=ck).graphed_steps == 29 and not ck.exists()
    del saved['graphed']; torch.save(saved, ck)                  # as a checkpoint from before replays were counted
    assert _graph_fit(monkeypatch, max_steps=40, checkpoint=ck).graphed_steps is None
