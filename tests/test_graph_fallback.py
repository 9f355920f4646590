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
        self.model, self.task, self.opt, self.shape = model, task, opt, [t.shape for t in batch]

    def fits(self, batch): return [t.shape for t in batch] == self.shape

    def __call__(self, batch):
        _Stub.replays += 1
        loss = H._forward_backward(self.model, self.task, batch, self.opt, contextlib.nullcontext(), set_to_none=False)
        self.opt.step()
        return loss.detach()


def _fit(monkeypatch, graphs: bool, fail: int = 0):
    monkeypatch.setenv('RELBOOK_CUDA_GRAPHS', '1' if graphs else '0')
    monkeypatch.setattr(H, 'graph_refusal', lambda task, cfg, device: None)        # the CPU stands in for the GPU
    monkeypatch.setattr(H, '_GraphedStep', _Stub)
    _Stub.made = _Stub.failed = _Stub.replays = 0; _Stub.fail = fail
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 2))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        H.fit(net, H.Classification(), _data(), None, H.TrainConfig(lr=3e-3, batch_size=64, max_steps=20),
              progress=False, checkpoint=None)
    return [p.detach().clone() for p in net.parameters()], [x for x in w if 'CUDA graph' in str(x.message)]


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


