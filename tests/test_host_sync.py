"""No training step reads a tensor back to the host.

On a GPU every tensor-to-Python conversion (`if t.min() < 0`, `.item()`, `.tolist()`, `.cpu()`, a boolean mask index)
makes the host wait until the device has finished all queued work: the next step cannot be launched while this one
runs, so small models train at the speed of their launch latency plus their kernels instead of the larger of the two.
A CPU tensor copied to the GPU (a mask or a position encoding built on the host in every forward pass) is one too:
PyTorch waits for a copy from pageable memory to finish.
`tests/test_cuda.py` counts real synchronisations on a GPU. Here, on the CPU, the training steps of the experiments that
train with `fit` (`fit`'s `_forward_backward`, at the smoke profile) run under a TorchFunctionMode that counts the
conversions, and the first step of each fit runs once more on the meta device, a stand-in for a GPU: there a read of
device data raises, and a tensor made on the CPU and moved to the model's device shows up as a copy to meta.
"""
import pytest
import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode

import relbook.harness as H
from relbook.core import check_ids

READ_BACKS = {torch.Tensor.__bool__, torch.Tensor.__int__, torch.Tensor.__float__, torch.Tensor.__index__,
              torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.numpy, torch.Tensor.cpu,
              torch.nonzero, torch.Tensor.nonzero, torch.masked_select, torch.Tensor.masked_select}


class ReadBacks(TorchFunctionMode):
    "Records each tensor-to-host conversion (a GPU sync) with the relbook line that made it."
    def __init__(self):
        super().__init__(); self.where = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        mask_index = (func is torch.Tensor.__getitem__ and len(args) > 1 and isinstance(args[1], torch.Tensor)
                      and args[1].dtype == torch.bool)
        if func in READ_BACKS or mask_index:
            import traceback
            frames = [f for f in traceback.extract_stack()[:-1] if '/relbook/' in f.filename]
            self.where.append(f"{getattr(func, '__name__', func)} at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}"
                              if frames else getattr(func, '__name__', str(func)))
        return func(*args, **(kwargs or {}))


class HostToDevice(TorchFunctionMode):
    """Records each blocking copy of a CPU tensor to another device (on a GPU, PyTorch waits for it). A copy asked to be
    `non_blocking` is not one: the code that asks (`relbook.core.to_device`) copies from pinned memory on a GPU."""
    def __init__(self):
        super().__init__(); self.where = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in (torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.copy_) and isinstance(args[0], torch.Tensor):
            src, dst = (args[1], args[0]) if func is torch.Tensor.copy_ else (args[0], out)
            asynchronous = (kwargs or {}).get('non_blocking', False) or (len(args) > 2 and args[2] is True)
            if (isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor) and src.device.type == 'cpu' and dst.device.type != 'cpu'
                    and not asynchronous):
                import traceback
                frames = [f for f in traceback.extract_stack()[:-1] if '/relbook/' in f.filename]
                self.where.append(f"{frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else '?')
        return out


def meta_step(model, task, batch) -> list:
    """The CPU-to-device copies of one training step, found by running it on the meta device (shapes, no data) as a
    stand-in for a GPU: a tensor a forward pass builds on the CPU and moves to the model's device shows up as a copy to
    meta. Model, task and random state are copies: the real training is not touched."""
    import copy
    state = torch.get_rng_state()
    try:
        m, t = copy.deepcopy(model).to('meta'), copy.deepcopy(task)
        mb = H._tagged(tuple(x.to('meta') for x in batch), H._id_ranges(batch))
        p = HostToDevice()
        with p:
            m.train(); t.loss(m, mb).backward()
        return p.where
    finally:
        torch.set_rng_state(state)


@pytest.fixture
def probed_steps(monkeypatch):
    "Every training step's forward and backward pass runs under the probe, the first of each fit also on meta."
    seen = {'steps': 0, 'where': [], 'copies': [], 'meta_steps': 0}
    inner = H._forward_backward

    def probed(model, task, batch, opt, amp, *args):
        if not getattr(model, '_meta_probed', False):
            seen['copies'] += meta_step(model, task, batch); seen['meta_steps'] += 1
            model._meta_probed = True
        p = ReadBacks()
        with p: loss = inner(model, task, batch, opt, amp, *args)
        seen['steps'] += 1; seen['where'] += p.where
        return loss
    monkeypatch.setattr(H, '_forward_backward', probed)
    return seen


# The experiments that train with `fit` on integer inputs (token ids) or through custom losses: each smoke run trains real
# models of its chapter (sorting: Abstractor, Ablation, Transformer and the pre-training transfer; mathematics: Abstractor (d),
# Transformers, TP-Transformer with and without roles; DAT seq2seq, language model and vision; relational games; SET;
# the BoxWorld encoders' supervised and imitation training).
EXPERIMENTS = ['object_sorting', 'sorting_pretraining', 'math_benchmark', 'tp_roles', 'dat_math', 'dat_lm', 'dat_vision',
               'relational_games', 'set_classification', 'bridge_locate', 'boxworld_imitation']


# Chapter 14's augmentation turns draws of its CPU generator into Python numbers (crop box, MixUp weight): host values, not
# reads of the device. On the CPU the probe cannot tell them apart; the meta step can: reading a meta tensor raises.
HOST_DRAWS = {'dat_vision'}


@pytest.mark.parametrize('name', EXPERIMENTS)
def test_training_steps_read_nothing_back(name, probed_steps):
    H.run_experiment(name, 'smoke')
    assert probed_steps['steps'] > 0, f"{name} trained no step through fit at smoke: the test would pass without testing"
    if name not in HOST_DRAWS:
        assert not probed_steps['where'], f"{name}: {len(probed_steps['where'])} read-backs in {probed_steps['steps']} steps, e.g. {sorted(set(probed_steps['where']))[:5]}"
    assert probed_steps['meta_steps'] > 0
    assert not probed_steps['copies'], f"{name}: a training step copies CPU tensors to the device at {sorted(set(probed_steps['copies']))[:5]}"


def test_untagged_ids_are_still_read_and_checked(probed_steps):
    "The probe sees a read-back where one happens: a model fed ids that no fit tagged checks them by reading them."
    from relbook.sorting import sorting_model
    net = sorting_model('Transformer')
    p = ReadBacks()
    with p: net(torch.randn(2, 10, 12), torch.zeros(2, 10, dtype=torch.long))
    assert any('core.py' in w for w in p.where), p.where
    with pytest.raises(ValueError, match=r'tgt_in must hold token ids in \[0, 11\)'):
        net(torch.randn(2, 10, 12), torch.full((2, 10), 11))


def test_fit_still_refuses_out_of_range_ids():
    "A training set whose ids do not fit the vocabulary: its range does not place them in [0, vocab), so the step reads the batch and fails clearly."
    from relbook.sorting import sorting_model
    src, tgt = torch.randn(8, 10, 12), torch.randint(0, 10, (8, 11))
    tgt[3, 4] = 11
    with pytest.raises(ValueError, match=r'tgt_in must hold token ids in \[0, 11\), got ids in \[0, 11\]'):
        H.fit(sorting_model('Transformer'), H.Seq2Seq(pad_id=-1), (src, tgt), None,
              H.TrainConfig(batch_size=8, max_steps=2), progress=False, checkpoint=None)


def test_tagged_range_is_the_whole_datasets():
    "fit tags each batch with its training tensor's (min, max): a batch's own ids lie inside, and check_ids reads nothing."
    ranges = H._id_ranges((torch.randn(5, 2), torch.tensor([[2, 7], [3, 4]]), torch.tensor([True, False])))
    assert ranges == [None, (2, 7), None]
    batch = H._tagged((torch.randn(1, 2), torch.tensor([[3, 4]]), torch.tensor([True])), ranges)
    p = ReadBacks()
    with p: check_ids(batch[1][:, :1], 'tgt_in', 8)
    assert p.where == []
    with pytest.raises(ValueError, match=r'tgt_in must hold token ids in \[0, 7\), got ids in \[7, 8\]'):
        check_ids(batch[1] + 4, 'tgt_in', 7)                 # arithmetic makes a new tensor: read back, checked


def test_vision_augmentation_stays_on_the_batch_device():
    """Crops and MixUp/CutMix draw from the task's CPU generator and apply the draws where the images are: on the meta
    device (shapes only, no data) a read-back or a copy to the host would fail, so the loss runs only if there is none."""
    from relbook.dat_experiments import AugmentedClassification
    from relbook.datasets import mixup_cutmix, random_crop
    g = torch.Generator().manual_seed(0)
    x, y = torch.empty(6, 3, 8, 8, device='meta'), torch.empty(6, dtype=torch.long, device='meta')
    assert random_crop(x, 1, g).shape == (6, 3, 8, 8)
    out, t = mixup_cutmix(x, torch.empty(6, 10, device='meta'), 0.8, g)
    assert out.device.type == t.device.type == 'meta'
    net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 10)).to('meta')
    for seed in range(4):                                    # MixUp and CutMix batches both
        loss = AugmentedClassification(10, seed=seed).loss(net, (x, y))
        assert loss.device.type == 'meta' and loss.shape == ()


def test_a_training_step_leaves_no_autograd_graph_behind():
    """When step k+1 starts, no autograd node of step k is alive: `fit` keeps only the detached loss. A node kept alive
    remembers the CUDA stream it ran on, and the CUDA graph `fit` captures at step 1 (`RELBOOK_CUDA_GRAPHS=1`) failed on
    an H100 with "operation would make the legacy stream depend on a capturing blocking stream" while step 0's graph lived.
    A custom autograd Function's context is its graph node; a weak reference to it dies with the node."""
    import weakref
    nodes, alive = [], []

    class Tap(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            alive.append(sum(r() is not None for r in nodes)); nodes.append(weakref.ref(ctx)); return x.view_as(x)
        @staticmethod
        def backward(ctx, g): return g

    class Net(nn.Module):
        def __init__(self): super().__init__(); self.lin = nn.Linear(8, 2)
        def forward(self, x): return Tap.apply(self.lin(x))

    x, y = torch.randn(64, 8), torch.randint(0, 2, (64,))
    H.fit(Net(), H.Classification(), (x, y), None, H.TrainConfig(batch_size=16, max_steps=6), progress=False, checkpoint=None)
    assert len(nodes) == 6 and alive == [0] * 6, alive
