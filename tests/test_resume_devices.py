"""A trial stopped on one device and resumed on another (a `gpu` trial begun on the GPU and finished on the CPU) says so."""
import pytest
import torch
import torch.nn as nn

import relbook.harness as H


def _data():
    g = torch.Generator().manual_seed(0)
    return torch.randn(200, 8, generator=g), torch.randint(0, 2, (200,), generator=g)


def test_a_fit_resumed_on_another_device_names_both(tmp_path):
    """A checkpoint keeps the devices its fit trained on; a fit resumed elsewhere (a trial begun on the GPU and finished on
    the CPU) reports both, and its row says so (`fit_devices`); a fit on one device adds nothing to its row. A checkpoint
from before devices were kept names only the kind ('cuda' or 'cpu', from its RNG states): resumed on that kind, the fit
counts one device."""
    import time
    from relbook.core import device_name
    from relbook.harness import BudgetExhausted, time_budget

    class Slow(H.Classification):
        def loss(self, model, batch): time.sleep(0.002); return super().loss(model, batch)

    ck, cfg = tmp_path / 'c.pt', H.TrainConfig(lr=3e-3, batch_size=16, max_steps=200, eval_every=10, checkpoint_secs=0)
    net = lambda: (torch.manual_seed(0), nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 2)))[1]
    with time_budget(0.1), pytest.raises(BudgetExhausted):
        H.fit(net(), Slow(), _data(), None, cfg, progress=False, checkpoint=ck)
    saved = torch.load(ck, weights_only=False)
    here = device_name(torch.device('cpu'))
    assert saved['devices'] == [here] and 0 < saved['step'] < 200
    saved['devices'] = ['NVIDIA H100 80GB HBM3']; torch.save(saved, ck)          # as if begun on the GPU
    res = H.fit(net(), H.Classification(), _data(), None, cfg, progress=False, checkpoint=ck)
    assert res.devices == ['NVIDIA H100 80GB HBM3', here] and res.steps == 200
    assert H._convergence_fields([res])['fit_devices'] == res.devices
    one = H.fit(net(), H.Classification(), _data(), None, cfg, progress=False, checkpoint=None)
    assert one.devices == [here] and 'fit_devices' not in H._convergence_fields([one])
    del saved['devices']; saved['rng']['cuda'] = torch.zeros(16, dtype=torch.uint8); torch.save(saved, ck)   # older checkpoint
    assert H.fit(net(), H.Classification(), _data(), None, cfg, progress=False, checkpoint=ck).devices == ['cuda', here]
    del saved['rng']['cuda']; torch.save(saved, ck)         # an older checkpoint written on a CPU, resumed on one: one device
    again = H.fit(net(), H.Classification(), _data(), None, cfg, progress=False, checkpoint=ck)
    assert again.devices == [here] and 'fit_devices' not in H._convergence_fields([again])


def test_evaluate_moves_the_data_to_the_models_device():
    """`Task.evaluate` of a model on one device with data made on another (CPU data, a GPU model: chapter 91's cell failed so on
    an H100) moves each batch to the model; the metrics are the same-device ones. The `meta` device stands in for the GPU here."""
    x, y = _data()
    torch.manual_seed(0); net = nn.Linear(8, 2)
    seen = []
    net.register_forward_pre_hook(lambda m, inp: seen.append(inp[0].device))
    ref = H.Classification().evaluate(net, (x, y), batch_size=64)
    assert set(seen) == {torch.device('cpu')} and len(seen) == 4
    batches = list(H.eval_batches(nn.Linear(8, 2, device='meta'), (x, y), 64))
    assert [tuple(t.device.type for t in b) for b in batches] == [('meta', 'meta')] * 4
    assert [len(b[0]) for b in batches] == [64, 64, 64, 8]
    assert all(torch.equal(b[0], x[64 * i:64 * (i + 1)]) for i, b in enumerate(H.eval_batches(net, (x, y), 64)))
    assert H.Regression().evaluate(nn.Linear(8, 1), (x, torch.zeros(200, 1)))['max_err'] >= 0
    assert len(list(H.eval_batches(nn.Identity(), (x, y), 100))) == 2                   # no parameters: left where they are
