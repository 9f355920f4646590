"""The §4 agents: shapes, a training step, the entity–tile correspondence, the experiments at smoke, bad input."""
from dataclasses import replace

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
