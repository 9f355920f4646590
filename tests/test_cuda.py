"""CUDA paths of the harness: bf16 autocast keeps a small task's loss curve near fp32's, and no step waits for the GPU.

Skipped without CUDA (CI has none); run them on a GPU machine: `pytest tests/test_cuda.py`. A fit that could not capture
its step as a CUDA graph and trained eagerly (`GraphFallback`) fails these tests: a graph test must test a graph.
"""
import time
import warnings

import pytest
import torch
import torch.nn as nn

from relbook.harness import Classification, GraphFallback, TrainConfig, fit

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA (run on a GPU machine)'),
              pytest.mark.filterwarnings('error::relbook.harness.GraphFallback')]


def _data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=g)
    return x, (x[:, :8].sum(-1) > x[:, 8:].sum(-1)).long()


def _curve(precision, seed=0):
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 2))
    res = fit(net, Classification(), _data(4096, 0), _data(1024, 1),
              TrainConfig(lr=3e-3, batch_size=128, max_steps=400, eval_every=50, precision=precision),
              device='cuda', progress=False, checkpoint=None)
    return [h['val_loss'] for h in res.history], res.history[-1]['val_acc']


def test_bf16_loss_curve_stays_near_fp32():
    fp32, acc32 = _curve('fp32')
    bf16, acc16 = _curve('auto')                         # 'auto' on CUDA: bf16 autocast + TF32
    assert max(abs(a - b) for a, b in zip(fp32, bf16)) < 0.05, (fp32, bf16)
    assert abs(acc32 - acc16) < 0.02, (acc32, acc16)


def _sync_warnings(max_steps):
    net = nn.Linear(16, 2)
    torch.cuda.set_sync_debug_mode('warn')
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter('always')
            fit(net, Classification(), _data(2048, 0), None, TrainConfig(batch_size=64, max_steps=max_steps, eval_every=max_steps),
                device='cuda', progress=False, checkpoint=None)
    finally:
        torch.cuda.set_sync_debug_mode('default')
    assert not [x for x in w if issubclass(x.category, GraphFallback)], 'the graph was not captured: the fit trained eagerly'
    return sum('synchroniz' in str(x.message).lower() for x in w)


def test_no_host_sync_per_step():
    _sync_warnings(10)                                   # warm-up (lazy initialisation syncs once)
    short, long = _sync_warnings(40), _sync_warnings(400)
    assert long - short < 20, f"{long - short} more synchronisations for 360 more steps: the loop waits for the GPU every step"


def test_checkpoint_resumes_on_cuda(tmp_path):
    "A campaign's interrupted CUDA trial resumes from its checkpoint and ends where an uninterrupted fit ends."
    from relbook.harness import BudgetExhausted, time_budget

    class Slow(Classification):                          # at least 0.6 s for the 300 steps, however fast the GPU
        def loss(self, model, batch): time.sleep(0.002); return super().loss(model, batch)

    def run(ckpt, budget=None):
        torch.manual_seed(0); net = nn.Sequential(nn.Linear(16, 32), nn.Dropout(0.1), nn.Linear(32, 2))
        cfg = TrainConfig(lr=3e-3, batch_size=64, max_steps=300, eval_every=20, precision='fp32', checkpoint_secs=0)
        if budget is None: fit(net, Slow(), _data(1000, 0), _data(256, 1), cfg, device='cuda', progress=False, checkpoint=ckpt)
        else:
            with time_budget(budget), pytest.raises(BudgetExhausted):
                fit(net, Slow(), _data(1000, 0), _data(256, 1), cfg, device='cuda', progress=False, checkpoint=ckpt)
        return [p.detach().cpu() for p in net.parameters()]

    straight = run(None)
    ck = tmp_path / 'c.pt'
    run(ck, budget=0.15)                                 # stops mid-way, with its checkpoint
    assert ck.exists()
    resumed = run(ck)                                    # the generator's state was loaded onto the GPU before the fix
    assert all(torch.equal(a, b) for a, b in zip(resumed, straight)) and not ck.exists()


def test_fit_puts_tf32_back():
    "A fit on CUDA trains with TF32 and leaves the flags as it found them: evaluation after it runs in full fp32."
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        _curve('auto')
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _model_syncs(max_steps, net, task, data):
    "Synchronisations CUDA reports while `fit` trains `net` for `max_steps` steps (one evaluation, at the end)."
    torch.cuda.set_sync_debug_mode('warn')
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter('always')
            fit(net, task, data, None, TrainConfig(batch_size=128, max_steps=max_steps, eval_every=max_steps),
                device='cuda', progress=False, checkpoint=None)
    finally:
        torch.cuda.set_sync_debug_mode('default')
    assert not [x for x in w if issubclass(x.category, GraphFallback)], 'the graph was not captured: the fit trained eagerly'
    return sum('synchroniz' in str(x.message).lower() for x in w)


@pytest.mark.parametrize('graphs', ['0', '1'])
def test_sorting_model_steps_do_not_sync(monkeypatch, graphs):
    """The Abstractor of chapter 5 checks its target ids in every forward (the ids `fit` tagged are not read back) and
    builds its masks and position encodings on the GPU; with CUDA graphs on, a replayed step waits for nothing either."""
    from relbook.harness import Seq2Seq
    from relbook.sorting import sorting_model
    monkeypatch.setenv('RELBOOK_CUDA_GRAPHS', graphs)
    g = torch.Generator().manual_seed(0)
    data = torch.randn(1024, 10, 12, generator=g), torch.randint(0, 11, (1024, 11), generator=g)
    run = lambda s: _model_syncs(s, sorting_model('Abstractor'), Seq2Seq(pad_id=-1), data)
    run(4)
    short, long = run(20), run(200)
    assert long - short < 20, f"{long - short} more synchronisations for 180 more steps: each step waits for the GPU"


def test_augmented_vision_steps_do_not_sync():
    "Chapter 14's crops and MixUp/CutMix: drawn on the CPU, applied on the GPU, the batch never copied back."
    from relbook.dat_experiments import AugmentedClassification
    g = torch.Generator().manual_seed(0)
    data = torch.randn(1024, 3, 8, 8, generator=g), torch.randint(0, 10, (1024,), generator=g)
    net = lambda: nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 64), nn.GELU(), nn.Linear(64, 10))
    run = lambda s: _model_syncs(s, net(), AugmentedClassification(10), data)
    run(4)
    short, long = run(20), run(200)
    assert long - short < 20, f"{long - short} more synchronisations for 180 more steps: the augmentation waits for the GPU"


def _graph_fit(monkeypatch, graphs, net, task, train, val, cfg):
    monkeypatch.setenv('RELBOOK_CUDA_GRAPHS', '1' if graphs else '0')
    t0 = time.perf_counter()
    res = fit(net, task, train, val, cfg, device='cuda', progress=False, checkpoint=None)
    torch.cuda.synchronize()
    return res, time.perf_counter() - t0


@pytest.mark.parametrize('clip', [None, 0.01])
@pytest.mark.parametrize('precision', ['fp32', 'auto'])
def test_cuda_graph_step_computes_the_eager_step(monkeypatch, precision, clip):
    """Without dropout a replayed step runs the eager step's kernels: the same weights after 60 steps, also across the
    eager steps an epoch's last, smaller batch takes (1,000 items in batches of 128); with gradient clipping too (captured
    with the step), at a norm that clips every step: the clipped weights are not the unclipped ones."""
    def run(graphs, clip):
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 2))
        res, _ = _graph_fit(monkeypatch, graphs, net, Classification(), _data(1000, 0), None,
                            TrainConfig(lr=3e-3, batch_size=128, max_steps=60, precision=precision, grad_clip=clip))
        assert res.graphed_steps == (60 - 1 - 60 // 8 if graphs else 0), res.graphed_steps
        return [p.detach().float().cpu() for p in net.parameters()]
    eager, graphed = run(False, clip), run(True, clip)
    # the same kernels should give the same weights; the tolerance leaves room for a kernel choice that differs under
    # capture, and is still far below one Adam step (about lr = 3e-3 per weight), so a lost or doubled update fails
    tol = 1e-5 if precision == 'fp32' else 5e-4
    gap = max((a - b).abs().max().item() for a, b in zip(eager, graphed))
    assert gap <= tol, f"graphed weights differ from eager ones by {gap:.2e} (> {tol:.0e})"
    if clip:       # the clip acted: a graph that dropped it would not match (Adam undoes much of a clip; 0.022 eager on a CPU)
        free = run(False, None)
        assert max((a - b).abs().max().item() for a, b in zip(eager, free)) > 10 * tol


def test_cuda_graph_trains_the_sorting_model_as_eager_does(monkeypatch):
    """Chapter 5's Abstractor (dropout 0.1, bf16): graphed and eager training reach validation losses within 0.15 of each
    other after 400 updates (the dropout masks differ), well below the loss they started from; the graph is faster."""
    from relbook.harness import Seq2Seq
    from relbook.core import using_profile
    from relbook.sorting import sorting_model, protocol_splits, SORTING_TRAIN
    from dataclasses import replace
    with using_profile('gpu'):                           # the smoke pool holds 300 sequences
        sp = protocol_splits(0)
        train, val = sp.data('pool', 1000), sp.data('val')
    cfg = replace(SORTING_TRAIN, batch_size=128, max_steps=400, eval_every=100, patience=None)
    out = {}
    for graphs in (False, True):
        torch.manual_seed(0)
        out[graphs] = _graph_fit(monkeypatch, graphs, sorting_model('Abstractor'), Seq2Seq(pad_id=-1), train, val, cfg)
    (eager, t_eager), (graphed, t_graph) = out[False], out[True]
    first = eager.history[0]['val_loss']
    last_e, last_g = eager.history[-1]['val_loss'], graphed.history[-1]['val_loss']
    print(f"eager {t_eager:.1f}s, graphed {t_graph:.1f}s for 400 updates; val loss {last_e:.3f} vs {last_g:.3f} (step 100: {first:.3f})")
    assert abs(last_e - last_g) < 0.15 and max(last_e, last_g) < 0.8 * first, (first, last_e, last_g)
    # 1,000 sequences in batches of 128: each epoch's last batch (104) and step 0 train eagerly, the rest replay the graph
    assert eager.graphed_steps == 0 and graphed.graphed_steps == 400 - 1 - 400 // 8, graphed.graphed_steps



@pytest.mark.parametrize('model', ['TP-Transformer', 'DAT'])
def test_cuda_graph_trains_the_math_models_as_eager_does(monkeypatch, model):
    """Chapters 7 and 14's mathematics fits (their task `AlsoOn`, gradient clipping, bf16, padded batches of one shape):
    graphed and eager training of the TP-Transformer (no dropout) and Table 2's DAT (dropout 0.1) reach validation losses
    within 0.03 and 0.15 of each other after 100 updates, both far below the untrained model's, every full batch replayed.
    (On 2 CPU cores, eagerly: untrained about 4, after 100-150 updates about 1.6, for both models.)"""
    from dataclasses import replace
    from relbook.mathbench import AlsoOn, MATH_TRAIN, math_model
    from relbook.mathdata import math_data
    from relbook.dat_experiments import dat_math_model
    d = math_data('arithmetic__mixed', 1000, 200, 200, seed=0)
    cfg = replace(MATH_TRAIN, batch_size=64, max_steps=100, eval_every=50)
    task = AlsoOn({'interp': tuple(t.cuda() for t in d['test'])})
    out = {}
    for graphs in (False, True):
        torch.manual_seed(0)
        net = math_model('TP-Transformer') if model == 'TP-Transformer' else dat_math_model('DAT', 2)
        untrained = task.evaluate(net.cuda(), tuple(t.cuda() for t in d['val']))['loss']
        out[graphs] = _graph_fit(monkeypatch, graphs, net, task, d['train'], d['val'], cfg)
    (eager, t_eager), (graphed, t_graph) = out[False], out[True]
    last_e, last_g = eager.history[-1]['val_loss'], graphed.history[-1]['val_loss']
    print(f"{model}: eager {t_eager:.1f}s, graphed {t_graph:.1f}s for 100 updates; val loss {last_e:.3f} vs {last_g:.3f} (untrained {untrained:.3f})")
    assert abs(last_e - last_g) < (0.03 if model == 'TP-Transformer' else 0.15), (last_e, last_g)
    assert max(last_e, last_g) < 0.6 * untrained, (untrained, last_e, last_g)
    assert 'val_interp_acc' in graphed.history[-1]           # AlsoOn's extra curve, evaluated eagerly between replays
    # 1,000 problems in batches of 64: each epoch's last batch (40) and step 0 train eagerly, the rest replay the graph
    assert eager.graphed_steps == 0 and graphed.graphed_steps == 100 - 1 - 100 // 16, graphed.graphed_steps

def test_evaluate_a_cuda_model_on_cpu_data():
    "Data made on the CPU evaluates a model on the GPU (chapter 91's cell 33 failed so on an H100 on 2026-11-27), as on the CPU."
    torch.manual_seed(0)
    net, data = nn.Linear(16, 2), _data(1000, 3)
    ref = Classification().evaluate(net, data, batch_size=256)
    got = Classification().evaluate(net.cuda(), data, batch_size=256)
    assert got.keys() == ref.keys() and all(abs(got[k] - ref[k]) < 1e-4 for k in ref), (got, ref)
