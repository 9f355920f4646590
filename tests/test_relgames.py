"""Relational games (relbook.relgames): objects, the five tasks' labels from the pixels, splits, tensors, patches."""
import time

import numpy as np
import pytest
import torch

from relbook.relgames import (COLOURS, OBJECT_SETS, OOD_FAMILIES, SHAPE_FAMILIES, SHAPES, TASKS, _int_seed, _sprites, _unseen,
                              object_ids, patches, relgames_data, relgames_sample, render_object)

LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8)]


def cell_ids(image):
    "The 9 cells of a (36, 36, 3) image, row-major: -1 if empty, else an id shared exactly by the cells with identical pixels."
    ids, out = {}, []
    for r in range(3):
        for c in range(3):
            cell = image[12 * r:12 * (r + 1), 12 * c:12 * (c + 1)]
            out.append(-1 if not cell.any() else ids.setdefault(cell.tobytes(), len(ids)))
    return out


def relabel(task, g):
    "The label of a grid of cell ids, from identities alone (and the task's layout, asserted)."
    occupied, top, middle, bottom = [i for i, v in enumerate(g) if v >= 0], g[:3], g[3:6], g[6:]
    if task == 'same':
        assert len(occupied) == 3
        return int(len({g[i] for i in occupied}) < 3)
    if task == 'between':
        assert tuple(occupied) in LINES
        a, b, c = (g[i] for i in occupied)
        return int(a == c != b)
    if task in ('occurs', 'xoccurs'):
        assert middle == [-1] * 3 and min(bottom) >= 0 and sum(v >= 0 for v in top) == 1
        k = bottom.count(max(top))
        return int(k >= 1) if task == 'occurs' else int(k == 1)
    assert task == 'match_pattern' and middle == [-1] * 3 and min(top) >= 0 and min(bottom) >= 0
    pattern = lambda t: tuple(t.index(v) for v in t)        # A B A -> (0, 1, 0)
    return int(pattern(top) == pattern(bottom))


def sprite_set(ids):
    return {_sprites()[o].tobytes() for o in ids}


def cells_of(images):
    "Set of the bytes of every non-empty 12x12 cell of (n, 36, 36, 3) images."
    cells = images.reshape(-1, 3, 12, 3, 12, 3).transpose(0, 1, 3, 2, 4, 5).reshape(-1, 12, 12, 3)
    return {c.tobytes() for c in cells if c.any()}


# --- objects -------------------------------------------------------------------------------------

def test_render_object():
    sprites = [render_object(s, c) for s in range(len(SHAPES)) for c in range(len(COLOURS))]
    assert len(sprites) >= 40 and len(SHAPES) >= 8 and len(COLOURS) >= 5
    assert all(x.shape == (12, 12, 3) and x.dtype == np.uint8 for x in sprites)
    assert len({x.tobytes() for x in sprites}) == len(sprites), "two objects look alike"
    assert all(x.any() and not x[[0, -1]].any() and not x[:, [0, -1]].any() for x in sprites), "empty, or no margin"
    masks = {x.any(-1).tobytes() for x in sprites}
    assert len(masks) == len(SHAPES)
    x = render_object(1, 2); x[:] = 0
    assert render_object(1, 2).any(), "render_object must return a copy"
    for bad, msg in [((len(SHAPES), 0), 'shape must be an int in'), ((0, len(COLOURS)), 'colour must be an int in'),
                     ((-1, 0), 'shape'), ((0.5, 0), 'shape'), ((True, 0), 'shape')]:
        with pytest.raises(ValueError, match=msg): render_object(*bad)


def test_object_split_disjoint():
    a, tr, te = object_ids('geometric'), object_ids('train'), object_ids('recombined')
    assert not set(tr) & set(te) and set(tr) | set(te) == set(a) and len(a) == len(SHAPE_FAMILIES['geometric']) * len(COLOURS)
    assert abs(len(te) / len(a) - 1 / 3) < 0.05
    assert not sprite_set(tr) & sprite_set(te)
    with pytest.raises(ValueError, match=r"objects must be one of \('geometric', 'train', 'recombined', 'hexominoes', 'stripes'\)"):
        object_ids('val')


def test_held_out_families_are_new_shapes():
    "The out-of-distribution families share no shape with the training family (only the colours), and every family has all colours."
    fams = {f: object_ids(f) for f in SHAPE_FAMILIES}
    assert sum(len(v) for v in fams.values()) == len(SHAPES) * len(COLOURS) and len(set().union(*map(set, fams.values()))) == len(SHAPES) * len(COLOURS)
    masks = {f: {_sprites()[o].any(-1).tobytes() for o in ids} for f, ids in fams.items()}
    for f in OOD_FAMILIES:
        assert len(fams[f]) >= 6 * len(COLOURS) and not masks[f] & masks['geometric'], f"{f} reuses a geometric shape"
        assert set(np.divmod(fams[f], len(COLOURS))[1]) == set(range(len(COLOURS)))
    assert not masks['hexominoes'] & masks['stripes']
    hexo = [_sprites()[o].any(-1) for o in fams['hexominoes']]
    assert all(m.sum() == 24 for m in hexo), "a hexomino is six 2×2-pixel blocks"


# --- sampling ------------------------------------------------------------------------------------

@pytest.mark.parametrize('task', TASKS)
def test_shapes_dtypes_balance(task):
    for n in (1, 2, 57):
        x, y = relgames_sample(task, n, 3)
        assert x.shape == (n, 36, 36, 3) and x.dtype == np.uint8 and y.shape == (n,) and y.dtype == np.int64
        assert set(np.unique(y)) <= {0, 1} and abs(2 * int(y.sum()) - n) <= 1


@pytest.mark.parametrize('task', TASKS)
def test_determinism(task):
    state = np.random.get_state()[1].copy()
    x1, y1 = relgames_sample(task, 64, 5)
    x2, y2 = relgames_sample(task, 64, 5)
    assert np.array_equal(x1, x2) and np.array_equal(y1, y2)
    x3, y3 = relgames_sample(task, 64, 6)
    assert not np.array_equal(x1, x3)
    assert np.array_equal(np.random.get_state()[1], state), "the global RNG was touched"


@pytest.mark.parametrize('objects', OBJECT_SETS)
@pytest.mark.parametrize('task', TASKS)
def test_labels_from_pixels(task, objects):
    x, y = relgames_sample(task, 150, 21, objects=objects)
    assert [relabel(task, cell_ids(im)) for im in x] == y.tolist()
    assert cells_of(x) <= sprite_set(object_ids(objects)), "an object outside the requested set"


def test_hard_negatives():
    x, y = relgames_sample('same', 400, 2)
    near = 0
    for im in x[y == 0]:
        cells = [c for c in im.reshape(3, 12, 3, 12, 3).transpose(0, 2, 1, 3, 4).reshape(9, 12, 12, 3) if c.any()]
        near += len({c.any(-1).tobytes() for c in cells}) < 3 or len({tuple(c.max((0, 1))) for c in cells}) < 3
    assert near > 0.4 * (y == 0).sum(), "few negatives have a same-shape or same-colour pair"
    x, y = relgames_sample('xoccurs', 400, 2)
    k = np.array([(lambda g: g[6:].count(max(g[:3])))(cell_ids(im)) for im in x])
    assert (k[y == 1] == 1).all() and abs(int((k[y == 0] == 0).sum()) - int((k[y == 0] >= 2).sum())) <= 1
    x, y = relgames_sample('between', 400, 2)
    pairs = [len(set(g[i] for i in range(9) if g[i] >= 0)) == 2 for g in map(cell_ids, x[y == 0])]
    assert 0.3 < np.mean(pairs) < 0.7, "about half of the between negatives should hold an adjacent identical pair"


def test_speed():
    for task in TASKS:
        t = time.perf_counter(); relgames_sample(task, 10_000, 0)
        assert time.perf_counter() - t < 5, task


def test_bad_arguments():
    with pytest.raises(ValueError, match="task must be one of"): relgames_sample('occur', 4, 0)
    with pytest.raises(ValueError, match="objects must be one of"): relgames_sample('same', 4, 0, objects='novel')
    for n in (0, -3, 2.0):
        with pytest.raises(ValueError, match='n must be a positive int'): relgames_sample('same', n, 0)
    with pytest.raises(ValueError, match='seed must be a non-negative int'): relgames_sample('same', 4, -1)
    with pytest.raises(ValueError, match='task must be one of'): relgames_data('nope', 4, 4, 4)
    with pytest.raises(ValueError, match='n_test must be a positive int'): relgames_data('same', 4, 4, 0)
    with pytest.raises(ValueError, match='objects must be one of'): relgames_data('same', 4, 4, 4, objects='x')
    with pytest.raises(ValueError, match='ood must be one of'): relgames_data('same', 4, 4, 4, ood=('x',))
    with pytest.raises(ValueError, match='ood must be a tuple'): relgames_data('same', 4, 4, 4, ood='stripes')
    with pytest.raises(ValueError, match='ood must name distinct object sets'): relgames_data('same', 4, 4, 4, objects='stripes', ood=('stripes',))
    with pytest.raises(ValueError, match='ood must name distinct object sets'): relgames_data('same', 4, 4, 4, ood=('stripes', 'stripes'))


# --- tensors -------------------------------------------------------------------------------------

def test_relgames_data():
    d = relgames_data('occurs', 100, 20, 50, seed=3)
    assert set(d) == {'train', 'val', 'test'}
    for (x, y), n in zip(d.values(), (100, 20, 50)):
        assert x.shape == (n, 3, 36, 36) and x.dtype == torch.float32 and y.shape == (n,) and y.dtype == torch.long
        assert 0 <= x.min() and x.max() <= 1 and abs(2 * int(y.sum()) - n) <= 1
    e = relgames_data('occurs', 100, 20, 50, seed=3)
    assert all(torch.equal(a, b) for k in d for a, b in zip(d[k], e[k]))
    assert not torch.equal(d['train'][0][:20], d['val'][0]) and not torch.equal(d['train'][0][:50], d['test'][0])
    back = (d['train'][0] * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    assert [relabel('occurs', cell_ids(im)) for im in back] == d['train'][1].tolist()


def test_no_test_image_in_train():
    d = relgames_data('between', 1500, 10, 1500, seed=0, objects='train')   # small image space: collisions likely
    seen = {im.numpy().tobytes() for im in d['train'][0]}
    assert not any(im.numpy().tobytes() in seen for im in d['test'][0])
    ss = np.random.SeedSequence(9)
    x, y = relgames_sample('same', 40, _int_seed(np.random.SeedSequence(9)))
    xs, ys = _unseen('same', 40, ss, 'geometric', {im.tobytes() for im in x[:10]})     # the first 10 must be replaced
    assert np.array_equal(ys, y) and np.array_equal(xs[10:], x[10:])
    assert not {im.tobytes() for im in xs} & {im.tobytes() for im in x[:10]}
    assert [relabel('same', cell_ids(im)) for im in xs] == y.tolist()


def test_held_out_objects_in_data():
    ood = ('recombined', *OOD_FAMILIES)
    d = relgames_data('occurs', 64, 16, 64, seed=1, objects='train', ood=ood)
    assert list(d) == ['train', 'val', 'test', *ood]
    as_images = lambda t: (t * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    for k in ('train', 'val', 'test'): assert cells_of(as_images(d[k][0])) <= sprite_set(object_ids('train'))
    for k in ood:
        x, y = d[k]
        assert cells_of(as_images(x)) <= sprite_set(object_ids(k)), k
        assert [relabel('occurs', cell_ids(im)) for im in as_images(x)] == y.tolist(), f"{k}: labels disagree with the pixels"
    # an ood split depends on its name and the seed, not on the other splits asked for
    alone = relgames_data('occurs', 64, 16, 64, seed=1, objects='train', ood=('stripes',))
    assert torch.equal(alone['stripes'][0], d['stripes'][0]) and torch.equal(alone['test'][0], d['test'][0])
    assert not torch.equal(relgames_data('occurs', 64, 16, 64, seed=2, objects='train', ood=('stripes',))['stripes'][0], d['stripes'][0])


def test_patches():
    x = torch.arange(2 * 3 * 36 * 36, dtype=torch.float32).reshape(2, 3, 36, 36)
    p = patches(x)
    assert p.shape == (2, 9, 432)
    assert torch.equal(p[:, 0], x[:, :, :12, :12].reshape(2, -1))
    assert torch.equal(p[:, 1], x[:, :, :12, 12:24].reshape(2, -1))        # row-major: next patch is to the right
    assert torch.equal(p[:, 3], x[:, :, 12:24, :12].reshape(2, -1))
    assert torch.equal(p[:, 8], x[:, :, 24:, 24:].reshape(2, -1))
    assert patches(torch.zeros(4, 1, 6, 9), patch=3).shape == (4, 6, 9)
    with pytest.raises(ValueError, match='patch must divide'): patches(x, patch=7)
    with pytest.raises(ValueError, match='patch must divide'): patches(torch.zeros(1, 3, 36, 30))
    with pytest.raises(ValueError, match='patch must be a positive int'): patches(x, patch=0)
    with pytest.raises(ValueError, match=r'images must have shape \(b, c, h, w\)'): patches(x[0])
    with pytest.raises(ValueError, match='images must'): patches(np.zeros((1, 3, 36, 36)))


# --- the experiment ------------------------------------------------------------------------------

def test_rg_models_match_figure_2():
    "Fig. 2's models: DAT 0 + 2 and 1 + 1 heads, d = 128, head dimension 64, d_r = 2 (ours for 1 + 1), vs 2-head Transformers; the wide one has DAT's count."
    from relbook.relgames import RG_MAIN, RG_MODELS, RG_WIDE, rg_model
    from relbook.abstractor import count_params
    dat02, dat11, tf, wide = (rg_model(m) for m in RG_MAIN)
    for net, (sa, ra) in ((dat02, (0, 2)), (dat11, (1, 1)), (tf, (2, 0)), (wide, (2, 0))):
        a = net.encoder.blocks[0].attn
        assert (a.n_sa, a.n_ra) == (sa, ra) and net.pool == 'mean' and net.encoder.cfg.bias is False
        assert a.head_dim == net.cfg.d_model // 2
    for net in (dat02, dat11):
        a = net.encoder.blocks[0].attn
        assert a.head_dim == 64 and a.n_rel == 2 and a.rel_k is None and a.rel_q.bias is None     # d_r = 2, symmetric, no bias
    assert wide.cfg.d_model == RG_WIDE and abs(count_params(wide) / count_params(dat02) - 1) < 0.01
    assert set(RG_MODELS) >= {'CoRelNet', 'Abstractor', 'DAT (1 SA + 1 RCA)'}


def test_rg_trial_reports_in_and_out_of_distribution(monkeypatch):
    from relbook.relgames import rg_trial, rg_sizes, rg_protocol, rg_epochs, RG_DECISIVE
    monkeypatch.setenv('RELBOOK_PROFILE', 'smoke')
    from relbook.relgames import relgames_data, RG_OOD
    from relbook.harness import Classification
    calls, real = [], Classification.evaluate             # every evaluation's inputs and result, in order (validation first)
    monkeypatch.setattr(Classification, 'evaluate', lambda self, net, data, *a, **k: calls.append((data, out := real(self, net, data, *a, **k))) or out)
    r = rg_trial('occurs', 64, 'CoRelNet', 0)
    keys = ('test_acc', 'recombined_acc', 'hexominoes_acc', 'stripes_acc', 'ood_acc')
    assert all(0 <= r[k] <= 1 for k in keys)
    assert abs(r['ood_acc'] - (r['hexominoes_acc'] + r['stripes_acc']) / 2) < 1e-12
    # each reported accuracy is the evaluation on its own split: the last four calls, on the test set and each held-out family
    p = rg_protocol('smoke')
    d = relgames_data('occurs', 64, p['n_val'], p['n_test'], seed=0, objects='train', ood=RG_OOD)
    for (data, out), split in zip(calls[-4:], ('test', *RG_OOD)):
        assert torch.equal(data[0].cpu(), d[split][0]) and torch.equal(data[1].cpu(), d[split][1]), split
        assert out['acc'] == r[f'{split}_acc'], split
    gpu = rg_protocol('gpu')
    assert gpu['seeds'] >= 5 and set(gpu['models']) == set(RG_DECISIVE)
    assert rg_sizes('occurs', 'gpu') == [1000, 1500, 2000, 2500] and rg_sizes('match_pattern', 'gpu') == [15_000, 25_000]
    assert rg_protocol('quick')['seeds'] >= 3
    assert rg_epochs(1000, 'quick') * 2 >= 300 and rg_epochs(25_000, 'full') == 50


def test_gpu_protocol_is_version_2_and_its_trials_say_so():
    """The gpu profile trains to convergence (150 epochs, >= 3,000 updates, patience): its trials carry protocol=2, so that rows
    of the first gpu run (version 1, the paper's 50 epochs) never pass for them; a trial refuses a version its profile does not run."""
    from relbook.campaign import intercept
    from relbook.relgames import rg_budget, rg_protocol, rg_trial
    gpu, quick = intercept('relational_games', 'gpu')[0], intercept('relational_games', 'quick')[0]
    assert {t.get('protocol') for t in gpu} == {2} and all('protocol' not in t for t in quick)
    assert rg_protocol('gpu')['patience'] == 50 and rg_protocol('quick')['patience'] is None
    assert [rg_budget(n, 'gpu') for n in (1000, 2500, 15_000, 25_000)] == [3000, 3000, 4500, 7350]
    assert [rg_budget(n, 'quick') for n in (1000, 15_000)] == [300, 1500]
    with pytest.raises(ValueError, match='protocol must be 1'):
        rg_trial('occurs', 64, 'CoRelNet', 0, protocol=2)                       # the smoke profile runs version 1


def test_dropout_control_pairs_with_the_learning_curves(monkeypatch):
    """The control runs Figure 2's models with the official dropout placement; each of its trials has a partner in the
    learning-curve sweep (the same task, size, model and seed); the official placement changes no initial weight; a baseline
    without DAT's blocks refuses it."""
    import torch
    from relbook.campaign import intercept
    from relbook.relgames import rg_model, rg_trial, RG_MAIN
    for profile in ('quick', 'gpu'):
        ctl, main = intercept('rg_dropout_control', profile)[0], intercept('relational_games', profile)[0]
        assert ctl and {t['dropout'] for t in ctl} == {'official'} and {t['model'] for t in ctl} == set(RG_MAIN)
        assert all({k: v for k, v in t.items() if k != 'dropout'} in main for t in ctl)
    for m in RG_MAIN:
        torch.manual_seed(0); a = rg_model(m)
        torch.manual_seed(0); b = rg_model(m, 'official')
        assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
        assert b.encoder.blocks[0].mlp.drop.p == 0 and b.encoder.blocks[0].attn.attn_dropout == 0.1
    with pytest.raises(ValueError, match="dropout='official' applies to the ViDAT models"):
        rg_model('CoRelNet', 'official')
    with pytest.raises(ValueError, match="dropout must be one of"):
        rg_model(RG_MAIN[0], 'keras')
    monkeypatch.setenv('RELBOOK_PROFILE', 'smoke')
    r = rg_trial('occurs', 64, RG_MAIN[0], 0, dropout='official')
    assert 0 <= r['test_acc'] <= 1


@pytest.mark.parametrize('bad', [0, -3, 2.5, True])
def test_budget_refuses_a_bad_training_size(bad):
    "rg_epochs and rg_budget name n_train (0 divided by zero; rg_budget's NaN for an unknown profile must not swallow the error)."
    from relbook.relgames import rg_budget, rg_epochs
    for f in (rg_epochs, rg_budget):
        with pytest.raises(ValueError, match='n_train must be a positive int'):
            f(bad, 'quick')
    assert rg_budget(1000, 'no such profile') != rg_budget(1000, 'no such profile')      # NaN: a profile this chapter does not know


def test_ra_only_vs_mix_is_judged_as_equivalence():
    """'Slightly better ... only marginal' is read as a gap within ±RG_MARGIN, as 'marginally' is for CoRelNet: a clear gap
    larger than the margin contradicts it (a one-sided reading would call it support), a small one supports it."""
    import pandas as pd
    from relbook.evidence import CLAIMS
    from relbook.relgames import RG_MAIN, RG_MARGIN
    def rows(gap):
        return pd.DataFrame([dict(task=t, model=m, n_train=1000, seed=s, ood_acc=0.5, best_step=10, profile='quick',
                                  test_acc=0.7 + 0.01 * s + (gap + 0.002 * s) * (m == RG_MAIN[0]))
                             for t in ('occurs', 'xoccurs') for m in RG_MAIN[:2] for s in range(3)])
    c = CLAIMS['dat-relgames-ra-only-vs-mix']
    wide, narrow = c.evaluate(rows(2 * RG_MARGIN)).comparison, c.evaluate(rows(RG_MARGIN / 5)).comparison
    assert (wide.direction, wide.threshold) == (0, RG_MARGIN)
    assert wide.verdict == 'contradicts the paper' and narrow.verdict == 'supports the paper'


def test_judged_rows_postdate_the_initialisation_change():
    """Every stored row that can judge a claim of this chapter (its sweep's current grid) finished after the W_r initialisation
    change of chapter 12; the first H100 run, made before it, is history outside the grid."""
    import json
    from datetime import datetime
    from pathlib import Path
    from relbook.dat import INIT_CHANGE
    from relbook.evidence import current_records
    at = datetime.fromisoformat(INIT_CHANGE['at'])
    results = Path(__file__).resolve().parents[1] / 'results'
    for path in sorted(results.glob('relational_games-*.jsonl')) + sorted(results.glob('rg_dropout_control-*.jsonl')):
        name, profile = path.stem.rsplit('-', 1)
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        judged = current_records(name, profile, rows)
        assert all(datetime.fromisoformat(r['finished_at']) > at for r in judged), f"{path.name}: a judged row predates the change"
    gpu = results / 'relational_games-gpu.jsonl'
    rows = [json.loads(line) for line in gpu.read_text().splitlines() if line.strip()] if gpu.exists() else []
    v1 = [r for r in rows if 'protocol' not in r['params']]
    assert all(datetime.fromisoformat(r['finished_at']) < at for r in v1)          # what chapter 13 says of the first H100 run
