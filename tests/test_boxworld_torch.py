"""TorchBoxWorld (relbook.boxworld): step-for-step identical to the NumPy VecBoxWorld, resets, bad input, devices."""
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
import torch

from relbook.boxworld import BoxWorldConfig, Puzzle, TorchBoxWorld, VecBoxWorld, solve

OFFICIAL = BoxWorldConfig(horizon=40)                                        # top-left start, near-black empty slots
STORED = replace(OFFICIAL, start='random', inventory_colour='floor')       # the settings of chapter 11's stored runs
CONFIGS = {'bridge-official': OFFICIAL, 'bridge-stored-runs': STORED,
           'original-official': replace(OFFICIAL, bridge=False), 'original-stored-runs': replace(STORED, bridge=False)}


def episode_plan(p: Puzzle, rng: np.random.Generator) -> list:
    "A shortest win (40 %), a walk into a fatal box if there is one (30 %), else no plan (random moves to the horizon)."
    u = rng.random()
    if u < 0.4: return list(solve(p))
    if u < 0.7 and p.fail_slots: return list(solve(p, avoid_bridge=False, open_slot=int(rng.choice(p.fail_slots))))
    return []


def assert_same_step(a, b):
    "Outputs of VecBoxWorld.step (a) and TorchBoxWorld.step (b): identical values and matching dtypes."
    (o1, r1, d1, i1), (o2, r2, d2, i2) = a, b
    np.testing.assert_array_equal(o2.cpu().numpy(), o1)
    np.testing.assert_array_equal(r2.cpu().numpy(), r1)
    np.testing.assert_array_equal(d2.cpu().numpy(), d1)
    assert o2.dtype == torch.uint8 and r2.dtype == torch.float32 and d2.dtype == torch.bool
    assert set(i2) == set(i1)
    for k in i1: np.testing.assert_array_equal(i2[k].cpu().numpy(), i1[k], err_msg=k)


def lockstep(cfg, n_envs, n_steps, seed, bank=3, device='cpu', resets=()):
    "Run both with the same seed and actions; `resets`: steps before which both are reset (no seed) mid-run."
    vec, tw = VecBoxWorld(n_envs, cfg, seed), TorchBoxWorld(n_envs, cfg, seed, device=device, bank=bank)
    rng, events = np.random.default_rng(seed), Counter()
    np.testing.assert_array_equal(tw.reset().cpu().numpy(), vec.reset())
    plans = [None] * n_envs
    for t in range(n_steps):
        if t in resets:
            np.testing.assert_array_equal(tw.reset().cpu().numpy(), vec.reset())
            plans, events['reset_call'] = [None] * n_envs, events['reset_call'] + 1
        plans = [episode_plan(vec.puzzles[i], rng) if q is None else q for i, q in enumerate(plans)]
        a = np.array([q.pop(0) if q else rng.integers(4) for q in plans])
        out = vec.step(a)
        assert_same_step(out, tw.step(torch.as_tensor(a, device=device) if t % 2 else a))   # host and device actions
        _, r, d, info = out
        plans = [None if di else q for q, di in zip(plans, d)]
        events.update(won=int(info['won'].sum()), lost=int(info['opened_bridge'].sum()),
                      truncated=int(info['truncated'].sum()), key=int((r == cfg.reward_key).sum()), reset=int(d.sum()))
    for i in range(n_envs):                                                  # the states, not just what is rendered
        p, q = vec.state(i), tw.state(i)
        assert (p.grid == q.grid).all() and p.player == q.player and p.inventory == q.inventory
        assert p.puzzle_type == q.puzzle_type and p.fail_slots == q.fail_slots
    return events


@pytest.mark.parametrize('name', list(CONFIGS))
def test_torch_matches_numpy_step_for_step(name):
    "48 envs × 300 steps; a bank of 3 episodes per env, so the host top-up runs every other step."
    events = lockstep(CONFIGS[name], n_envs=48, n_steps=300, seed=1, resets=(150,))
    assert all(events[k] > 0 for k in ('won', 'lost', 'truncated', 'key', 'reset', 'reset_call')), events


def test_default_bank_and_reseeding():
    "The default bank (64): top-ups rarely; reset(seed=...) restarts both on the same streams."
    cfg = replace(OFFICIAL, horizon=25)
    vec, tw = VecBoxWorld(8, cfg, seed=4), TorchBoxWorld(8, cfg, seed=4)
    np.testing.assert_array_equal(tw.reset().numpy(), vec.reset())
    acts = np.random.default_rng(0).integers(4, size=(200, 8))
    for t, a in enumerate(acts):
        if t == 120: np.testing.assert_array_equal(tw.reset(seed=9).numpy(), vec.reset(seed=9))
        assert_same_step(vec.step(a), tw.step(a))
    assert [p.puzzle_type for p in tw.puzzles] == [p.puzzle_type for p in vec.puzzles]
    again = TorchBoxWorld(8, cfg, seed=9)
    np.testing.assert_array_equal(again.reset().numpy(), VecBoxWorld(8, cfg, seed=9).reset())


def test_bad_input_and_device_placement():
    tw = TorchBoxWorld(4, OFFICIAL, device=torch.device('cpu'))
    with pytest.raises(RuntimeError, match=r'call reset\(\) before step\(\)'):
        tw.step(np.zeros(4, int))
    tw.reset()
    for bad in (np.zeros(3, int), np.full(4, 4), np.full(4, -1), np.zeros(4), torch.zeros(4, dtype=torch.bool)):
        with pytest.raises(ValueError, match=r'actions must be an int array of shape \(4,\) with values in 0..3'):
            tw.step(bad)
    for bank in (1, 2.5, True):
        with pytest.raises(ValueError, match='bank must be an int >= 2'):
            TorchBoxWorld(4, OFFICIAL, bank=bank)
    with pytest.raises(ValueError, match='n_envs must be a positive int'):
        TorchBoxWorld(0, OFFICIAL)
    with pytest.raises(ValueError, match='seed must be a non-negative int'):
        TorchBoxWorld(4, OFFICIAL, seed=-1)
    obs, r, d, info = tw.step(np.zeros(4, np.int32))
    tensors = [obs, r, d, *info.values(), tw.grid, tw.pos, tw.inv, *tw._bank.values()]
    assert all(x.device == tw.device for x in tensors), "state and outputs live on the env's device"


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_torch_matches_numpy_on_cuda():
    events = lockstep(OFFICIAL, n_envs=16, n_steps=150, seed=2, device='cuda', resets=(70,))
    assert events['won'] > 0 and events['lost'] > 0 and events['reset'] > 0
