"""Relational games (relbook.relgames): objects, the five tasks' labels from the pixels, splits, tensors, patches."""
import time

import numpy as np
import pytest
import torch

from relbook.relgames import (COLOURS, OBJECT_SETS, SHAPES, TASKS, _int_seed, _sprites, _unseen, object_ids, patches,
                              relgames_data, relgames_sample, render_object)

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
    a, tr, te = object_ids('all'), object_ids('train'), object_ids('test')
    assert not set(tr) & set(te) and set(tr) | set(te) == set(a) and len(a) == len(SHAPES) * len(COLOURS)
    assert abs(len(te) / len(a) - 1 / 3) < 0.05
    assert not sprite_set(tr) & sprite_set(te)
    with pytest.raises(ValueError, match=r"objects must be one of \('all', 'train', 'test'\)"): object_ids('val')


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
    with pytest.raises(ValueError, match='objects_test must be one of'): relgames_data('same', 4, 4, 4, objects_test='x')


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
    d = relgames_data('between', 1500, 10, 1500, seed=0, objects_test='train')   # small image space: collisions likely
    seen = {im.numpy().tobytes() for im in d['train'][0]}
    assert not any(im.numpy().tobytes() in seen for im in d['test'][0])
    ss = np.random.SeedSequence(9)
    x, y = relgames_sample('same', 40, _int_seed(np.random.SeedSequence(9)))
    xs, ys = _unseen('same', 40, ss, 'all', {im.tobytes() for im in x[:10]})     # the first 10 must be replaced
    assert np.array_equal(ys, y) and np.array_equal(xs[10:], x[10:])
    assert not {im.tobytes() for im in xs} & {im.tobytes() for im in x[:10]}
    assert [relabel('same', cell_ids(im)) for im in xs] == y.tolist()


def test_held_out_objects_in_data():
    d = relgames_data('same', 64, 16, 64, seed=1, objects_test='test')
    as_images = lambda t: (t * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    assert cells_of(as_images(d['test'][0])) <= sprite_set(object_ids('test'))
    for k in ('train', 'val'): assert cells_of(as_images(d[k][0])) <= sprite_set(object_ids('train'))


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
