"""The RL lab (relbook.rl): V-trace against the paper's formula, the paper's RMSProp, the trainer's
learning, books, checkpoints and policy lag, and the evaluation helpers."""
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

from relbook.harness import ResultsStore, run_sweep
from relbook.rl import (ActorCriticMLP, ChainEnv, RLConfig, RMSPropTF, evaluate_policy, random_policy,
                        train_actor_critic, vtrace, vtrace_reference)


@pytest.fixture(autouse=True)
def _one_thread():
    "Tiny networks: one torch thread is several times faster than two on a shared machine."
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _trace(T=9, B=6, seed=0, boundaries=True):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
    keep = (torch.rand(T, B, generator=g, dtype=torch.float64) > 0.25) if boundaries else torch.ones(T, B, dtype=torch.bool)
    return dict(behaviour_logp=-r(T, B).abs(), target_logp=-r(T, B).abs(), rewards=r(T, B),
                discounts=0.95 * keep.double(), values=r(T, B), bootstrap_value=r(B))


@pytest.mark.parametrize('rho_bar,c_bar', [(1.0, 1.0), (2.0, 0.7), (0.5, 1.5), (math.inf, math.inf)])
def test_vtrace_scan_matches_the_sum_formula(rho_bar, c_bar):
    args = _trace(seed=int(c_bar * 10) % 11 if math.isfinite(c_bar) else 4)
    assert (args['discounts'] == 0).any()
    for fast, ref in zip(vtrace(**args, rho_bar=rho_bar, c_bar=c_bar), vtrace_reference(**args, rho_bar=rho_bar, c_bar=c_bar)):
        torch.testing.assert_close(fast, ref, rtol=0, atol=1e-12)


def test_vtrace_on_policy_is_the_nstep_return():
    args = _trace(seed=1)
    args['target_logp'] = args['behaviour_logp'].clone()
    T, B = args['rewards'].shape
    nstep = []
    for s in range(T):
        ret, disc = torch.zeros(B, dtype=torch.float64), torch.ones(B, dtype=torch.float64)
        for t in range(s, T):
            ret, disc = ret + disc * args['rewards'][t], disc * args['discounts'][t]
        nstep.append(ret + disc * args['bootstrap_value'])
        torch.testing.assert_close(vtrace(**args).vs[s], nstep[s], rtol=0, atol=1e-12)
    # the policy-gradient advantage on-policy: r_s + γ_s · (n-step return from s+1, V(x_T) at the end) − V(x_s), from the
    # returns built here by hand, not from either implementation's v
    after = torch.stack(nstep[1:] + [args['bootstrap_value']])
    want = args['rewards'] + args['discounts'] * after - args['values']
    for out in (vtrace(**args), vtrace_reference(**args)):
        torch.testing.assert_close(out.pg_advantages, want, rtol=0, atol=1e-12)


def test_vtrace_truncations():
    on = _trace(seed=2, boundaries=False)
    on['target_logp'] = on['behaviour_logp'].clone()
    big = dict(on, target_logp=on['behaviour_logp'] + 0.3)                          # every ratio e^0.3 > 1
    torch.testing.assert_close(vtrace(**big).vs, vtrace(**on).vs)                   # truncated to on-policy
    assert not torch.allclose(vtrace(**big, rho_bar=math.inf, c_bar=math.inf).vs, vtrace(**on).vs)
    torch.testing.assert_close(vtrace(**big).rhos, torch.full_like(on['rewards'], math.exp(0.3)))
    # c̄ -> 0 cuts every trace: v_s - V(x_s) is the one-step, ρ-weighted TD error δ_s
    x = _trace(seed=3)
    out = vtrace(**x, c_bar=1e-300)
    nxt = torch.cat([x['values'][1:], x['bootstrap_value'][None]])
    rho = torch.exp(x['target_logp'] - x['behaviour_logp']).clamp(max=1.0)
    torch.testing.assert_close(out.vs - x['values'], rho * (x['rewards'] + x['discounts'] * nxt - x['values']))


def test_vtrace_rejects_bad_inputs_and_has_no_gradient():
    x = _trace()
    with pytest.raises(ValueError, match=r'values must have shape \(T, B\) with B=6'):
        vtrace(**dict(x, values=x['values'][:, :2]))
    with pytest.raises(ValueError, match=r'bootstrap_value must have shape \(B\)'):
        vtrace(**dict(x, bootstrap_value=x['values']))
    with pytest.raises(ValueError, match='c_bar must be a positive number'):
        vtrace(**x, c_bar=-1.0)
    v = x['values'].clone().requires_grad_()
    assert not vtrace(**dict(x, values=v)).vs.requires_grad


def test_rmsprop_tf_is_the_papers_form():
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(5, dtype=torch.float64, generator=g) * 3 for _ in range(4)]

    def run(make):
        w = torch.zeros(5, dtype=torch.float64, requires_grad=True)
        opt = make([w])
        for gr in grads:
            w.grad = gr.clone(); opt.step()
        return w.detach()

    x, r = torch.zeros(5, dtype=torch.float64), torch.ones(5, dtype=torch.float64)    # TF1: r starts at 1
    for gr in grads:
        r = 0.99 * r + 0.01 * gr ** 2
        x = x - 2e-4 * gr / torch.sqrt(r + 0.1)
    torch.testing.assert_close(run(lambda p: RMSPropTF(p)), x, rtol=0, atol=1e-15)
    # ε = 0, r0 = 0: the TF and torch forms coincide
    torch.testing.assert_close(run(lambda p: RMSPropTF(p, lr=0.01, eps=0.0, initial_r=0.0)),
                               run(lambda p: torch.optim.RMSprop(p, lr=0.01, alpha=0.99, eps=0.0)))
    # ... and differ at ε = 0.1
    assert not torch.allclose(run(lambda p: RMSPropTF(p, lr=0.01, initial_r=0.0)),
                              run(lambda p: torch.optim.RMSprop(p, lr=0.01, alpha=0.99, eps=0.1)))
    with pytest.raises(ValueError, match=r'momentum must be a finite number in \[0, 1\)'):
        RMSPropTF([torch.zeros(1, requires_grad=True)], momentum=1.0)
    for kw, msg in ((dict(eps=float('nan')), 'eps must be a finite number'), (dict(initial_r=float('nan')), 'initial_r must be a finite'),
                    (dict(eps=-0.1), 'eps must be a finite number >= 0'), (dict(lr=float('inf')), 'lr must be'),
                    (dict(alpha=float('nan')), 'alpha must be a finite number in')):
        with pytest.raises(ValueError, match=msg):
            RMSPropTF([torch.zeros(1, requires_grad=True)], **kw)


def test_large_eps_rmsprop_is_smoothed_clipping():
    "The paper's identity κg/√(r+ε) = κg/√r · S(√(r/ε)), S(u) = u/√(1+u²)."
    g = torch.logspace(-4, 2, 50, dtype=torch.float64) * torch.tensor([1.0, -1.0]).repeat(25).double()
    r, eps = g ** 2 * 1.7, 0.1
    S = lambda u: u / torch.sqrt(1 + u ** 2)
    torch.testing.assert_close(g / torch.sqrt(r + eps), g / torch.sqrt(r) * S(torch.sqrt(r / eps)), rtol=1e-13, atol=0)


def test_rlconfig_defaults_and_validation():
    cfg = RLConfig()
    assert (cfg.lr, cfg.rms_alpha, cfg.rms_eps, cfg.rms_momentum, cfg.entropy_cost, cfg.gamma, cfg.unroll) == \
        (2e-4, 0.99, 0.1, 0.0, 5e-3, 0.99, 40)
    assert cfg.batch == 1280
    for bad, msg in [(dict(gamma=-0.1), 'gamma must be a finite number in'), (dict(rho_bar=0), 'rho_bar must be a positive'),
                     (dict(policy_lag=1.5), 'policy_lag must be an int'), (dict(grad_clip=0), 'grad_clip must be a positive'),
                     (dict(n_envs=0), 'n_envs must be a positive int'), (dict(rms_eps=-1), 'rms_eps must be a finite number >= 0')]:
        with pytest.raises(ValueError, match=msg):
            RLConfig(**bad)


def _cfg(**kw):
    base = dict(n_envs=8, unroll=10, lr=3e-3, total_frames=2_000, log_every_frames=400, checkpoint_secs=0)
    return RLConfig(**{**base, **kw})


def _params(net):
    return torch.cat([p.detach().flatten() for p in net.parameters()])


def _train(ckpt=None, eval_fn=None, cfg=None, **kw):
    torch.manual_seed(0)
    net = ActorCriticMLP(8, 4)
    res = train_actor_critic(net, ChainEnv(8, seed=0), cfg or _cfg(), device='cpu', progress=False,
                             checkpoint=ckpt, eval_fn=eval_fn, **kw)
    return res, net


def test_trainer_learns_the_corridor_far_above_random():
    torch.manual_seed(0)
    net = ActorCriticMLP(8, 4)
    cfg = RLConfig(n_envs=16, unroll=20, lr=3e-3, total_frames=24_000, log_every_frames=4_800)
    res = train_actor_critic(net, ChainEnv(16, seed=0), cfg, device='cpu', progress=False, checkpoint=None)
    learned = evaluate_policy(net, ChainEnv(16, seed=7), 320, device='cpu')
    rand = evaluate_policy(random_policy(4), ChainEnv(16, seed=7), 320, device='cpu')
    assert learned['win_rate'] > rand['win_rate'] + 0.5, (learned['win_rate'], rand['win_rate'])
    assert learned['mean_return'] > rand['mean_return'] + 0.5
    h = res.history_frame()
    assert h.win_rate.iloc[-1] > h.win_rate.iloc[0] + 0.3, h.win_rate.tolist()
    assert res.finished and res.frames == 24_000 and res.updates == 24_000 // 320
    assert h.frames.tolist() == [4_800, 9_600, 14_400, 19_200, 24_000]
    assert h.episodes.sum() == len(res.episodes)                                     # every episode in one row
    assert {'fps', 'wall_time_s', 'mean_return', 'win_rate', 'loss', 'pg_loss', 'baseline_loss', 'entropy',
            'rho_mean', 'rho_clipped', 'grad_norm'} <= set(h.columns)


def test_crash_then_resume_reproduces_the_uninterrupted_run(tmp_path):
    straight, net = _train()
    calls = []

    def crash(net):
        calls.append(1)
        if len(calls) == 3: raise RuntimeError('simulated crash')
        return {'probe': 1.0}

    ck = tmp_path / 'rl.pt'
    with pytest.raises(RuntimeError, match='simulated crash'):
        _train(ck, crash)
    assert ck.exists()
    resumed, net2 = _train(ck)
    assert not ck.exists()
    assert (resumed.frames, resumed.updates) == (straight.frames, straight.updates)
    assert [r['frames'] for r in resumed.history] == [r['frames'] for r in straight.history]
    assert [r.get('probe') for r in resumed.history] == [1.0, 1.0, None, None, None]   # rows before the crash kept
    assert torch.equal(_params(net2), _params(net))
    assert resumed.episodes.equals(straight.episodes)


def test_max_updates_budget_then_finish(tmp_path):
    straight, net = _train()
    ck = tmp_path / 'rl.pt'
    part, _ = _train(ck, max_updates=6)
    assert not part.finished and part.updates == 6 and part.frames == 6 * 80 and ck.exists()
    part2, _ = _train(ck, max_updates=6)
    assert part2.updates == 12
    rest, net2 = _train(ck)
    assert rest.finished and not ck.exists() and rest.updates == straight.updates
    assert torch.equal(_params(net2), _params(net))


def test_time_budget_stops_checkpoints_and_resumes(tmp_path):
    "A campaign's deadline stops the learner between updates with a checkpoint (RL trials overran one on the GPU), and the resumed run is the uninterrupted one."
    from relbook.harness import BudgetExhausted, time_budget
    straight, net = _train()
    ck = tmp_path / 'rl.pt'
    with time_budget(1e-6), pytest.raises(BudgetExhausted, match=r'time budget spent at frame 80 of 2,000; resumes from'):
        _train(ck)                                   # the deadline has passed by the first update's end: one update, then stop
    assert ck.exists()
    rest, net2 = _train(ck)
    assert rest.finished and not ck.exists() and (rest.frames, rest.updates) == (straight.frames, straight.updates)
    assert torch.equal(_params(net2), _params(net))
    with time_budget(1e-6), pytest.raises(BudgetExhausted, match=r'at frame 80 of 2,000$'):
        _train(None)                                 # without a checkpoint it still stops, and says nothing of resuming


def test_resume_refuses_another_config(tmp_path):
    ck = tmp_path / 'rl.pt'
    _train(ck, max_updates=2)
    with pytest.raises(ValueError, match='another RLConfig'):
        _train(ck, cfg=_cfg(lr=1e-3))
    longer, _ = _train(ck, cfg=_cfg(total_frames=2_400))                    # a larger budget is a valid resume
    assert longer.finished and longer.frames == 2_400


def test_auto_checkpoint_inside_run_sweep(tmp_path):
    store = ResultsStore(tmp_path / 'rl_demo.jsonl')
    state = {'crash': True}

    def trial(seed):
        def eval_fn(net):
            if state['crash']: raise RuntimeError('simulated crash')
            return {}
        torch.manual_seed(seed)
        res = train_actor_critic(ActorCriticMLP(8, 4), ChainEnv(8, seed=seed), _cfg(), device='cpu',
                                 progress=False, eval_fn=eval_fn)
        return {'frames': res.frames, 'episodes': len(res.episodes)}

    with pytest.raises(RuntimeError, match='simulated crash'):
        run_sweep('rl_demo', [{'seed': 0}], trial, store=store, progress=False)
    ck_dir = tmp_path / 'checkpoints' / 'rl_demo'
    assert len(list(ck_dir.glob('*.pt'))) == 1, "the trial's checkpoint comes from run_sweep"
    state['crash'] = False
    df = run_sweep('rl_demo', [{'seed': 0}], trial, store=store, progress=False)
    assert df.frames.tolist() == [2_000] and not list(ck_dir.glob('*.pt'))


def test_policy_lag_gives_the_actors_old_parameters(tmp_path):
    snaps = []
    cfg = _cfg(policy_lag=2, log_every_frames=80)                           # a history row (and eval) per update

    def record(net):
        snaps.append(_params(net).clone()); return {}

    ck = tmp_path / 'rl.pt'
    _train(ck, record, cfg=cfg, max_updates=5)
    state = torch.load(ck, weights_only=False)
    actor = torch.cat([v.flatten() for v in state['actor'].values()])
    assert torch.equal(actor, snaps[1]), "rollout 5 must use the parameters after update 5 - 1 - lag = 2"
    assert torch.equal(torch.cat([v.flatten() for v in state['lagged'][0].values()]), snaps[2])
    on, _ = _train(cfg=_cfg(policy_lag=0))
    assert max(abs(r['rho_mean'] - 1) for r in on.history) < 1e-5
    assert all(r['rho_clipped'] == 0 for r in on.history)


class _TaggedChain(ChainEnv):
    "The corridor with a per-episode vector in info (like BoxWorld's puzzle type) and no episode_return."
    def step(self, actions):
        obs, rew, done, info = super().step(actions)
        info.pop('episode_return')
        info['puzzle_type'] = np.stack([self.start * 0 + 1, np.arange(self.n_envs) % 2, self.start * 0], -1)
        return obs, rew, done, info


def test_episode_records_keep_info_arrays_and_sum_returns():
    torch.manual_seed(0)
    res = train_actor_critic(ActorCriticMLP(8, 4), _TaggedChain(8, seed=0), _cfg(total_frames=800), device='cpu',
                             progress=False, checkpoint=None)
    eps = res.episodes
    assert len(eps) > 0 and {'frames', 'env', 'return', 'length', 'won', 'start', 'puzzle_type'} <= set(eps.columns)
    assert set(eps.puzzle_type) <= {(1, 0, 0), (1, 1, 0)}
    assert (eps.puzzle_type.map(lambda p: p[1]) == eps.env % 2).all()
    # the trainer's own running returns (info has none here) match the corridor's rewards
    np.testing.assert_allclose(eps['return'], np.where(eps.won, 1.0, 0.0) - 0.01 * eps.length, atol=1e-6)
    assert eps.groupby('puzzle_type').won.mean().notna().all()


class _AlwaysRight(nn.Module):
    def forward(self, obs):
        return torch.tensor([-9.0, 9.0, -9.0, -9.0]).repeat(len(obs), 1), torch.zeros(len(obs))


def test_evaluate_policy():
    ev = evaluate_policy(_AlwaysRight(), ChainEnv(4, seed=3), 11, greedy=True, device='cpu')
    assert ev['n_episodes'] == 11 and ev['win_rate'] == 1.0
    assert ev['episodes'].groupby('env').size().tolist() == [3, 3, 3, 2]
    assert ev['mean_length'] == pytest.approx((7 - ev['episodes'].start).mean())
    assert ev['mean_return'] == pytest.approx(1 - 0.01 * ev['mean_length'])
    rand = evaluate_policy(random_policy(4), ChainEnv(16, seed=0), 480, device='cpu')
    assert 0 <= rand['win_rate'] < 0.3 and rand['n_episodes'] == 480
    # the corridor's random walk: mean return = win rate - 0.01 · mean length
    assert rand['mean_return'] == pytest.approx(rand['win_rate'] - 0.01 * rand['mean_length'])
    a = evaluate_policy(random_policy(4), ChainEnv(16, seed=0), 64, device='cpu', seed=5)
    b = evaluate_policy(random_policy(4), ChainEnv(16, seed=0), 64, device='cpu', seed=5)
    assert a['episodes'].equals(b['episodes'])                                          # seeded
    assert evaluate_policy(random_policy(4), ChainEnv(4), 8, max_steps=3, device='cpu')['n_episodes'] == 0
    with pytest.raises(ValueError, match='n_episodes must be a positive int'):
        evaluate_policy(random_policy(4), ChainEnv(4), 0)


def test_trainer_rejects_bad_envs_and_networks():
    with pytest.raises(ValueError, match='cfg.n_envs must equal venv.n_envs=4'):
        train_actor_critic(ActorCriticMLP(8, 4), ChainEnv(4), _cfg(), device='cpu', checkpoint=None)
    with pytest.raises(ValueError, match='venv must have n_envs'):
        train_actor_critic(ActorCriticMLP(8, 4), object(), _cfg(), device='cpu', checkpoint=None)

    class NoValue(nn.Module):
        def __init__(self): super().__init__(); self.lin = nn.Linear(8, 4)
        def forward(self, obs): return self.lin(obs), self.lin(obs)

    with pytest.raises(ValueError, match=r'network value must have shape \(8\)'):
        train_actor_critic(NoValue(), ChainEnv(8), _cfg(), device='cpu', checkpoint=None)
    with pytest.raises(ValueError, match='actions must have shape'):
        ChainEnv(4).step(np.zeros(3, int))


def test_actor_critic_runs_on_a_torch_environment():
    "The learner steps a device-resident TorchBoxWorld (actions to its device, rewards and dones copied back for the log)."
    from relbook.boxworld import TorchBoxWorld, BoxWorldConfig
    from relbook.simplicial_agents import BoxWorldAgent, RELATIONAL_AGENT, RL_BRIDGE_ENV
    from relbook.rl import RLConfig, train_actor_critic, evaluate_policy
    torch.manual_seed(0)
    net = BoxWorldAgent(RELATIONAL_AGENT, RL_BRIDGE_ENV.obs_shape)
    env = TorchBoxWorld(4, RL_BRIDGE_ENV, seed=0, device='cpu')
    res = train_actor_critic(net, env, RLConfig(n_envs=4, unroll=5, total_frames=200, optimizer='adam', lr=1e-4, log_every_frames=100),
                             seed=0, device='cpu', checkpoint=None, progress=False)
    assert res.frames >= 200 and len(res.history) >= 2 and all(np.isfinite(r['grad_norm']) for r in res.history)
    ev = evaluate_policy(net, TorchBoxWorld(4, RL_BRIDGE_ENV, seed=1, device='cpu'), 8, device='cpu')
    types = np.stack(ev['episodes']['puzzle_type'].to_numpy())
    assert ev['n_episodes'] == 8 and (types[:, 0] >= 2).all() and (types[:, 1] >= 1).all()   # bridges only, a in {2, 3}


def test_a_trial_resumed_elsewhere_keeps_its_devices_and_earlier_time(tmp_path):
    """A learner's checkpoint carries the devices it trained on and the trial's wall time so far: a trial stopped by a campaign on
    a GPU and finished on a CPU says both devices, and its row's wall time counts the GPU's share (`wall_time_prior_s`). Three
    boxworld_rl trials resumed so on 2026-11-27 before this was kept: their rows said cpu only."""
    store = ResultsStore(tmp_path / 'rl_moved.jsonl')
    first = {'stop': True}

    def trial(seed):
        torch.manual_seed(seed)
        res = train_actor_critic(ActorCriticMLP(8, 4), ChainEnv(8, seed=seed), _cfg(), device='cpu', progress=False,
                                 max_updates=2 if first['stop'] else None)
        if first['stop']: raise RuntimeError('stopped, as a campaign stops a trial')   # its checkpoint stays
        return {'frames': res.frames, 'devices': res.devices}

    with pytest.raises(RuntimeError, match='stopped'):
        run_sweep('rl_moved', [{'seed': 0}], trial, store=store, progress=False)
    first['stop'] = False
    ck = next((tmp_path / 'checkpoints' / 'rl_moved').glob('*.pt'))
    state = torch.load(ck, weights_only=False)
    assert state['devices'] == ['cpu'] and state['trial_elapsed_s'] > 0
    state.update(devices=['NVIDIA H100 80GB HBM3'], trial_elapsed_s=100.0)      # as if the first part had run on an H100
    torch.save(state, ck)
    row = run_sweep('rl_moved', [{'seed': 0}], trial, store=store, progress=False).iloc[0]
    assert row.frames == 2_000 and row.devices == ['NVIDIA H100 80GB HBM3', 'cpu']
    assert row.wall_time_prior_s == 100.0 and row.wall_time_s > 100.0
