"""The §4 agents: shapes, a training step, the entity–tile correspondence, the experiments at smoke, bad input."""
from dataclasses import replace

import math
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from relbook.boxworld import BoxWorldConfig, VecBoxWorld, bridge_dataset
from relbook.simplicial import SIMPLICIAL
from relbook.simplicial_agents import (AgentConfig, BoxWorldAgent, BridgeLocator, ENCODERS, RELATIONAL_AGENT,
                                       SIMPLICIAL_AGENT, bridge_trial, rl_trial, load_agent, virtual_pair_attention,
                                       model_path)


@pytest.fixture(scope='module')
def boards():
    return torch.as_tensor(bridge_dataset(6, 0)['obs'])


@pytest.mark.parametrize('name', list(ENCODERS))
def test_agent_shapes_and_a_training_step(name, boards):
    torch.manual_seed(0)
    net = BoxWorldAgent(ENCODERS[name])
    logits, value = net(boards)
    assert logits.shape == (6, 4) and value.shape == (6,)
    opt = torch.optim.Adam(net.parameters(), 1e-3)
    target = torch.zeros(6, dtype=torch.long)
    losses = []
    for _ in range(4):
        loss = F.cross_entropy(net(boards)[0], target) + net(boards)[1].pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step(); losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_torso_entities_follow_tiles(boards):
    torso = BoxWorldAgent(SIMPLICIAL_AGENT).torso
    x = boards[:1]
    y = x.clone(); y[0, 2, 6] = 255 - y[0, 2, 6]
    moved = ((torso(y) - torso(x)).abs().sum(-1)[0] > 0).nonzero().flatten().tolist()
    assert moved == [r * 8 + c for r in range(5) for c in range(8) if r <= 2 <= r + 2 and c <= 6 <= c + 2]


def test_other_board_sizes_and_bad_input(boards):
    cfg = BoxWorldConfig(rows=7, cols=6, solution_lengths=(1,))
    obs = VecBoxWorld(2, cfg, seed=0).reset()
    net = BoxWorldAgent(RELATIONAL_AGENT, obs_shape=cfg.obs_shape)
    assert net(torch.as_tensor(obs))[0].shape == (2, 4)
    with pytest.raises(ValueError, match='obs must have shape'):
        net(boards)                                             # a 7×10×3 board for a 7×7×3 agent
    with pytest.raises(ValueError, match='obs_shape must be'):
        BoxWorldAgent(RELATIONAL_AGENT, obs_shape=(7, 10, 4))
    with pytest.raises(ValueError, match='d_model must be >= 3'):
        AgentConfig(encoder=replace(SIMPLICIAL, d_model=2, d_head=1, d_head2=1))
    assert BridgeLocator(RELATIONAL_AGENT)(boards).shape == (6, 10)


def test_experiments_run_at_smoke(tmp_path):
    m = bridge_trial('simplicial', 64, 0)
    assert 0 <= m['test_acc'] <= 1 and m['n_params'] > 0
    with pytest.raises(ValueError, match='encoder must be one of'):
        bridge_trial('transformer', 64, 0)
    for bad in (1, True, '2'):                                  # rows of version 1's boards cannot be rerun by this code
        with pytest.raises(ValueError, match='boards must be 2'):
            bridge_trial('relational', 64, 0, boards=bad)
        with pytest.raises(ValueError, match='boards must be 2'):
            rl_trial('random', 0, boards=bad)
    r = rl_trial('random', 0)
    assert 0 <= r['eval_win_rate'] <= 1 and r['eval_episodes'] == 16
    a = rl_trial('simplicial', 0)
    assert a['frames'] >= 640 and isinstance(a['history'], list)
    net = load_agent('simplicial', 0)                           # saved by the trial (smoke results folder)
    pairs, att1 = virtual_pair_attention(net, bridge_dataset(1, 3)['obs'][0])
    assert pairs.shape == (4, 40) and np.allclose(pairs.sum(0), 1, atol=1e-4)
    assert att1.shape == (2, 2, 40)
    with pytest.raises(ValueError, match='no trained'):
        load_agent('relational (4 blocks)', 7)
    assert model_path('relational (4 blocks)', 1).name == 'relational_4_blocks-seed1.pt'


# --- the rows the experiments store (issue 19) ----------------------------------------------------

def test_bridge_trial_row_val_loss_is_the_fits_best_loss(monkeypatch):
    "`val_loss` is the early-stopping fit's best validation loss; `val_acc` is that model's validation accuracy, not a loss."
    import relbook.simplicial_agents as sa
    fits, real_fit = [], sa.fit
    monkeypatch.setattr(sa, 'fit', lambda *a, **k: fits.append(real_fit(*a, **k)) or fits[-1])
    row = sa.bridge_trial('relational', 64, 0)
    (res,) = fits
    assert row['val_loss'] == res.best_score == min(h['val_loss'] for h in res.history)
    best = next(h for h in res.history if h['step'] == res.best_step)
    assert row['val_acc'] == best['val_acc'] and 0 <= row['val_acc'] <= 1
    assert row['val_acc'] != row['val_loss']


def test_committed_bridge_rows_store_the_loss_as_val_loss():
    "The committed quick rows were migrated: the loss is under `val_loss`; any `val_acc` is an accuracy."
    import json
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / 'results' / 'bridge_locate-quick.jsonl'
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    from relbook.boxworld import GENERATOR_VERSION        # 32 rows on each version's boards (version 1's: history)
    assert [r['params'].get('boards', 1) for r in rows].count(GENERATOR_VERSION) == 32
    assert all(r['val_loss'] > 0 for r in rows)
    assert all(0 <= r['val_acc'] <= 1 for r in rows if 'val_acc' in r)


def test_rl_trial_row_keeps_learner_diagnostics_and_episode_counts():
    from relbook.simplicial_agents import DIAGNOSTICS
    row = rl_trial('relational', 0)
    keys = [f'train_{k}{s}' for k in DIAGNOSTICS for s in ('', '_tail')]
    assert all(k in row and np.isfinite(row[k]) for k in keys), {k: row.get(k) for k in keys}
    assert row['train_entropy'] > 0 and row['train_rho_mean'] > 0 and 0 <= row['train_rho_clipped'] <= 1
    assert row['train_grad_norm'] > 0
    assert row['history'] and all('episodes' in h and isinstance(h['episodes'], int) for h in row['history'])
    assert all(all(k in h for k in DIAGNOSTICS) for h in row['history'])
    assert row['train_entropy'] == row['history'][-1]['entropy']
    assert not any(k.startswith('train_') for k in rl_trial('random', 0))     # nothing was trained


def test_stored_runs_env_reproduces_the_committed_experiments():
    """STORED_RUNS_ENV gives, byte for byte, the boards and episodes of the environment the stored rows were made with (those of
    the bridge generator's version 2, GENERATOR_VERSION; version 1's were 41404a2e... and 8d7b0bc0...)."""
    import hashlib
    from relbook.simplicial_agents import STORED_RUNS_ENV
    d = bridge_dataset(64, 0, STORED_RUNS_ENV)
    assert hashlib.sha1(d['obs'].tobytes() + d['label'].tobytes()).hexdigest() == '01939cdd7015c83f9b10aae5b30e050e285a90f9'
    vec = VecBoxWorld(8, replace(STORED_RUNS_ENV, horizon=30), seed=3)
    h, rng = hashlib.sha1(vec.reset().tobytes()), np.random.default_rng(0)
    for _ in range(200):
        o, r, d, _ = vec.step(rng.integers(4, size=8)); h.update(o.tobytes()); h.update(r.tobytes()); h.update(d.tobytes())
    assert h.hexdigest() == '9e9629f2911c7c18a5f4d68fce92eeb549ab2c96'


def test_benchmark_agents_times_a_learner_step_per_agent():
    from relbook.simplicial_agents import benchmark_agents
    df = benchmark_agents(batch=2, repeats=1)
    assert list(df.agent) == ['relational', 'simplicial', 'relational (4 blocks)']
    assert (df.ms > 0).all() and df.loc[df.agent == 'relational', 'vs_relational'].item() == 1.0
    with pytest.raises(ValueError, match='batch'):
        benchmark_agents(batch=0)


def test_rl_progress_reads_convergence_off_the_training_history():
    import pandas as pd
    from relbook.evidence import CLAIMS, convergence
    from relbook.simplicial_agents import rl_progress, RL_CONVERGENCE
    rising = [dict(frames=f, win_rate=f / 1000) for f in range(100, 1001, 100)]                # peak at the end
    early = [dict(frames=f, win_rate=0.5 if f == 300 else 0.1) for f in range(100, 1001, 100)]   # peak at 300 of 1,000
    rows = pd.DataFrame([dict(agent='relational', seed=0, history=rising), dict(agent='simplicial', seed=0, history=early),
                         dict(agent='random', seed=0, history=None), dict(agent='simplicial', seed=1, history=[])])
    out = rl_progress(rows)
    assert [convergence(r, *RL_CONVERGENCE) for r in out.to_dict('records')] == ['still improving', 'converged', 'converged', 'unknown']
    # the ledger counts them: three seeds of agents whose win rates still rise make the verdict provisional
    df = pd.DataFrame([dict(agent=a, seed=s, eval_win_rate=w + 0.01 * s + 0.005 * (-1) ** s * (a != 'random'), eval_episodes=100, frames=1000, history=rising)
                       for s in range(3) for a, w in (('relational', 0.3), ('simplicial', 0.4), ('random', 0.05))])
    ev = CLAIMS['simplicial-rl-agents-learn'].evaluate(df)
    assert ev.comparison.verdict == 'supports the paper'
    assert sum(convergence(r, *ev.convergence_keys) == 'still improving' for r in ev.rows.to_dict('records')) == 6


def test_eval_metrics_report_the_b2_win_rate():
    """The RL trials record the win rate on the types with bridge source b ≥ 2 (mean over those types), the rate chapter 10
    finds can speak to the paper's explanation; NaN when no such type was played."""
    from relbook.simplicial_agents import _eval_metrics
    eps = [dict(puzzle_type=t, won=w) for t, w in [((1, 0, 0), True), ((2, 2, 3), True), ((2, 2, 3), False), ((3, 3, 4), False),
                                                   ((3, 1, 2), True)]]
    ev = dict(episodes=eps, win_rate=0.6, mean_return=1.0, mean_length=10.0, n_episodes=len(eps))
    out = _eval_metrics(ev)
    assert out['eval_win_b2'] == pytest.approx((0.5 + 0.0) / 2)          # per type, then the mean over the two b ≥ 2 types
    assert out['eval_win_bridge'] == pytest.approx(2 / 4)
    none = _eval_metrics(dict(ev, episodes=eps[:1] + eps[-1:]))
    assert math.isnan(none['eval_win_b2'])
