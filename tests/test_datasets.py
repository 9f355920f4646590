"""Tests of the image and text data of the DAT experiments (relbook.datasets)."""
import pickle
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from relbook.datasets import (CIFAR, WordTokenizer, channel_stats, corpus_info, corpus_topics, image_splits,
                              lm_data, load_cifar, load_digits_images, mixup_cutmix, normalize, random_crop,
                              split_indices, text_corpus, topic_groups, write_cifar_batch)


# --- CIFAR ----------------------------------------------------------------------------------------

def _write_split(root, name, split, n_per_file=3, seed=0):
    "A miniature of one split in the official layout; returns the images and labels written."
    spec, g = CIFAR[name], torch.Generator().manual_seed(seed)
    files = spec[split]
    x = torch.randint(0, 256, (n_per_file * len(files), 3, 32, 32), generator=g, dtype=torch.uint8)
    y = torch.randint(0, spec['n_classes'], (len(x),), generator=g)
    for f, xb, yb in zip(files, x.chunk(len(files)), y.chunk(len(files))):
        write_cifar_batch(root / spec['folder'] / f, xb, yb, key=spec['key'])
    return x, y


@pytest.mark.parametrize('name', ['cifar10', 'cifar100'])
@pytest.mark.parametrize('split', ['train', 'test'])
def test_cifar_roundtrip_from_parent_and_batches_folder(tmp_path, name, split):
    x, y = _write_split(tmp_path, name, split)
    for root in (tmp_path, tmp_path / CIFAR[name]['folder'], str(tmp_path)):
        xl, yl = load_cifar(root, name, split)
        assert xl.dtype == torch.uint8 and yl.dtype == torch.int64
        assert xl.shape == (len(x), 3, 32, 32) and torch.equal(xl, x) and torch.equal(yl, y)


def test_cifar_pixel_layout_follows_the_official_description(tmp_path):
    "Rows are R, G, B planes of 32x32 in row-major order; a file written by hand (numpy-1 pickle names) loads so."
    data = np.arange(2 * 3072, dtype=np.int64).reshape(2, 3072).astype(np.uint8)
    data[1, 1024 * 2 + 32 * 5 + 7] = 200                    # image 1, blue, row 5, column 7
    raw = pickle.dumps({b'data': data, b'labels': [3, 9]}, protocol=2)
    raw = raw.replace(b'numpy._core.multiarray', b'numpy.core.multiarray')   # as the official files name it
    folder = tmp_path / 'cifar-10-batches-py'; folder.mkdir()
    (folder / 'test_batch').write_bytes(raw)
    x, y = load_cifar(tmp_path, 'cifar10', 'test')
    assert x[1, 2, 5, 7] == 200 and torch.equal(x.reshape(2, 3072), torch.from_numpy(data))
    assert y.tolist() == [3, 9]


def test_cifar_missing_files_say_where_to_put_them(tmp_path):
    with pytest.raises(FileNotFoundError, match='no network') as e:
        load_cifar(tmp_path, 'cifar10', 'train')
    assert 'cifar-10-batches-py' in str(e.value) and 'data_batch_1' in str(e.value)
    _write_split(tmp_path, 'cifar10', 'test')                 # the test split alone does not make a train split
    with pytest.raises(FileNotFoundError, match='data_batch_1'):
        load_cifar(tmp_path, 'cifar10', 'train')
    with pytest.raises(FileNotFoundError, match='cifar-100-python'):
        load_cifar(tmp_path / 'nothing', 'cifar100', 'test')


def _batch(folder, obj):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / 'test_batch').write_bytes(pickle.dumps(obj, protocol=2))


def test_cifar_corrupt_files_raise_value_error(tmp_path):
    folder = tmp_path / 'cifar-10-batches-py'
    _batch(folder, {b'data': np.zeros((2, 3000), np.uint8), b'labels': [0, 1]})
    with pytest.raises(ValueError, match=r'\(N, 3072\)'): load_cifar(tmp_path, 'cifar10', 'test')
    _batch(folder, {b'data': np.zeros((2, 3072), np.float32), b'labels': [0, 1]})
    with pytest.raises(ValueError, match='uint8'): load_cifar(tmp_path, 'cifar10', 'test')
    _batch(folder, {b'data': np.zeros((2, 3072), np.uint8), b'labels': [0]})
    with pytest.raises(ValueError, match='N=2 integer labels'): load_cifar(tmp_path, 'cifar10', 'test')
    _batch(folder, {b'data': np.zeros((2, 3072), np.uint8), b'labels': [0, 10]})
    with pytest.raises(ValueError, match=r'\[0, 10\)'): load_cifar(tmp_path, 'cifar10', 'test')
    _batch(folder, {b'data': np.zeros((2, 3072), np.uint8), b'fine_labels': [0, 1]})
    with pytest.raises(ValueError, match="b'labels'"): load_cifar(tmp_path, 'cifar10', 'test')
    (folder / 'test_batch').write_bytes(b'not a pickle')
    with pytest.raises(ValueError, match='not a CIFAR'): load_cifar(tmp_path, 'cifar10', 'test')


def test_cifar_pickles_cannot_run_code(tmp_path):
    _batch(tmp_path / 'cifar-10-batches-py', {b'data': np.zeros((1, 3072), np.uint8), b'labels': [0], b'x': print})
    with pytest.raises(ValueError, match='print is not allowed in a CIFAR batch'):
        load_cifar(tmp_path, 'cifar10', 'test')


def test_cifar100_labels_go_up_to_99(tmp_path):
    x = torch.zeros(2, 3, 32, 32, dtype=torch.uint8)
    write_cifar_batch(tmp_path / 'cifar-100-python' / 'test', x, [0, 99], key=b'fine_labels')
    assert load_cifar(tmp_path, 'cifar100', 'test')[1].tolist() == [0, 99]
    write_cifar_batch(tmp_path / 'cifar-100-python' / 'test', x, [0, 100], key=b'fine_labels')
    with pytest.raises(ValueError, match=r'\[0, 100\)'): load_cifar(tmp_path, 'cifar100', 'test')


def test_cifar_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match='name must be one of'): load_cifar(tmp_path, 'cifar20')
    with pytest.raises(ValueError, match='split must be one of'): load_cifar(tmp_path, 'cifar10', 'val')
    x = torch.zeros(2, 3, 32, 32, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r'images must have shape \(n, 3, 32, 32\)'):
        write_cifar_batch(tmp_path / 'b', x[:, :1], [0, 1])
    with pytest.raises(ValueError, match='dtype uint8'): write_cifar_batch(tmp_path / 'b', x.float(), [0, 1])
    with pytest.raises(ValueError, match='labels must be 2 integers'): write_cifar_batch(tmp_path / 'b', x, [0])
    with pytest.raises(ValueError, match='labels must be 2 integers'): write_cifar_batch(tmp_path / 'b', x, [0.5, 1.0])
    with pytest.raises(ValueError, match='key must be one of'): write_cifar_batch(tmp_path / 'b', x, [0, 1], key=b'y')


# --- digits, splits, normalisation --------------------------------------------------------------

@pytest.fixture(scope='module')
def digits():
    return load_digits_images()


def test_digits_shape_and_range(digits):
    x, y = digits
    assert x.shape == (1797, 1, 8, 8) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert x.min() == 0 and x.max() == 1 and y.unique().tolist() == list(range(10))
    assert torch.allclose(x * 16, (x * 16).round()), "pixels are counts 0..16 divided by 16"


def test_split_is_stratified_disjoint_complete_and_seeded(digits):
    _, y = digits
    torch_state, np_state = torch.get_rng_state(), np.random.get_state()[1].copy()
    idx = split_indices(y, 150, 100, seed=3)
    assert torch.equal(torch_state, torch.get_rng_state()) and (np_state == np.random.get_state()[1]).all()
    assert {k: len(v) for k, v in idx.items()} == {'train': 1547, 'val': 150, 'test': 100}
    assert torch.equal(torch.cat(list(idx.values())).sort().values, torch.arange(len(y)))
    for v in idx.values():
        counts = torch.bincount(y[v], minlength=10)
        assert (counts > 0).all() and counts.max() - counts.min() <= 0.05 * len(v) + 2, counts
    again = split_indices(y, 150, 100, seed=3)
    assert all(torch.equal(again[k], idx[k]) for k in idx)
    assert not torch.equal(split_indices(y, 150, 100, seed=4)['val'], idx['val'])


def test_split_keeps_rare_classes_in_every_part():
    y = torch.tensor([0] * 100 + [1] * 4 + [2] * 6)
    for seed in range(20):
        idx = split_indices(y, 10, 10, seed=seed)
        assert all(y[v].unique().tolist() == [0, 1, 2] for v in idx.values()), seed


def test_split_bad_arguments(digits):
    x, y = digits
    with pytest.raises(ValueError, match='misses some of the 10 classes'): split_indices(y, 9, 100, seed=0)
    with pytest.raises(ValueError, match='n_val must be a positive int'): split_indices(y, 0, 100, seed=0)
    with pytest.raises(ValueError, match='n_val \\+ n_test must be < 1797'): split_indices(y, 1000, 900, seed=0)
    with pytest.raises(ValueError, match='seed must be a non-negative int'): split_indices(y, 100, 100, seed=-1)
    with pytest.raises(ValueError, match='non-negative integers'): split_indices(y.float(), 100, 100, seed=0)
    with pytest.raises(ValueError, match='labels must have shape'): image_splits(x, y[:10], 100, 100, seed=0)


def test_image_splits_and_normalize_with_train_statistics(digits):
    x, y = digits
    parts = image_splits(x, y, 200, 200, seed=0)
    idx = split_indices(y, 200, 200, seed=0)
    assert torch.equal(parts['test'][0], x[idx['test']]) and torch.equal(parts['test'][1], y[idx['test']])
    mean, std = channel_stats(parts['train'][0])
    assert mean.shape == std.shape == (1,)
    m2, s2 = channel_stats(normalize(parts['train'][0], mean, std))
    assert torch.allclose(m2, torch.zeros(1), atol=1e-5) and torch.allclose(s2, torch.ones(1), atol=1e-5)
    rgb = torch.rand(5, 3, 4, 4, generator=torch.Generator().manual_seed(0)) * torch.tensor([1., 10., 100.])[:, None, None]
    m, s = channel_stats(rgb)
    z = normalize(rgb, m, s)
    assert torch.allclose(z.mean((0, 2, 3)), torch.zeros(3), atol=1e-5) and torch.allclose(z.std((0, 2, 3), correction=0), torch.ones(3), atol=1e-5)
    with pytest.raises(ValueError, match='std must be positive'): normalize(rgb, m, torch.tensor([1., 0., 1.]))
    with pytest.raises(ValueError, match=r'mean must have shape \(c\)'): normalize(rgb, m[:2], s)


# --- augmentation -------------------------------------------------------------------------------

def test_random_crop_identity_shape_windows_and_determinism():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(1, 256, (16, 3, 32, 32), generator=g, dtype=torch.uint8)
    assert torch.equal(random_crop(x, 0, torch.Generator().manual_seed(1)), x)
    c = random_crop(x, 4, torch.Generator().manual_seed(1))
    assert c.shape == x.shape and c.dtype == x.dtype
    assert torch.equal(c, random_crop(x, 4, torch.Generator().manual_seed(1)))
    p = F.pad(x, (4,) * 4)
    for i in range(len(x)):      # each crop is some window of its own padded image
        assert any(torch.equal(c[i], p[i, :, a:a + 32, b:b + 32]) for a in range(9) for b in range(9)), i
    with pytest.raises(ValueError, match='padding must be an int >= 0'): random_crop(x, -1, g)
    with pytest.raises(ValueError, match='generator must be a torch.Generator'): random_crop(x, 2, 0)


@pytest.mark.parametrize('p_cutmix', [0.0, 0.5, 1.0])
def test_mixup_cutmix_soft_targets_and_determinism(p_cutmix):
    g = torch.Generator().manual_seed(2)
    x, y = torch.rand(32, 3, 16, 16, generator=g), torch.arange(32) % 10
    y1 = F.one_hot(y, 10).float()
    for seed in range(5):
        xm, ym = mixup_cutmix(x, y1, 0.8, torch.Generator().manual_seed(seed), p_cutmix=p_cutmix)
        assert xm.shape == x.shape and ym.shape == y1.shape
        assert torch.allclose(ym.sum(1), torch.ones(32), atol=1e-6) and (ym >= 0).all()
        xm2, ym2 = mixup_cutmix(x, y1, 0.8, torch.Generator().manual_seed(seed), p_cutmix=p_cutmix)
        assert torch.equal(xm, xm2) and torch.equal(ym, ym2)


def test_mixup_and_cutmix_mix_pixels_as_they_mix_targets():
    x = torch.rand(32, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    y1 = F.one_hot(torch.arange(32) % 10, 10).float()
    for seed in range(5):
        xm, ym = mixup_cutmix(x, y1, 1.0, torch.Generator().manual_seed(seed), p_cutmix=1.0)   # CutMix
        own = (ym * y1).sum(1)
        kept = (xm == x).flatten(1).float().mean(1)
        assert torch.allclose(kept[own < 1], own[own < 1], atol=1e-6)
        xm, ym = mixup_cutmix(x, y1, 1.0, torch.Generator().manual_seed(seed), p_cutmix=0.0)   # MixUp
        lam = (ym * y1).sum(1)[(ym * y1).sum(1) < 1]
        assert torch.allclose(lam, lam[:1].expand_as(lam)), "one lambda per batch"


def test_mixup_cutmix_bad_arguments():
    g = torch.Generator()
    x, y = torch.rand(4, 3, 8, 8), torch.eye(4)
    with pytest.raises(ValueError, match='alpha must be a positive number'): mixup_cutmix(x, y, -1.0, g)
    with pytest.raises(ValueError, match=r'p_cutmix must be a finite number in \[0, 1\]'): mixup_cutmix(x, y, 1.0, g, p_cutmix=2)
    with pytest.raises(ValueError, match='y_onehot must have shape'): mixup_cutmix(x, y[:3], 1.0, g)
    with pytest.raises(ValueError, match='generator must be a torch.Generator'): mixup_cutmix(x, y, 1.0, None)


# --- text ---------------------------------------------------------------------------------------

def test_corpus_is_the_sorted_pydoc_topics_with_provenance():
    import hashlib
    from pydoc_data.topics import topics
    text = text_corpus()
    assert text == '\n\n'.join(topics[k] for k in sorted(topics))
    assert list(corpus_topics()) == sorted(topics)
    info = corpus_info()
    assert info['n_topics'] == len(topics) and info['characters'] == len(text) > 100_000
    assert info['sha256'] == hashlib.sha256(text.encode()).hexdigest()


def test_topic_groups_partition_and_hold_shared_paragraphs_together():
    groups = topic_groups()
    names = [k for g in groups for k in g]
    assert sorted(names) == list(corpus_topics()) and len(names) == len(set(names))
    where = {k: i for i, g in enumerate(groups) for k in g}
    assert where['specialnames'] == where['attribute-access'] and where['compound'] == where['if']


def test_tokenizer_vocabulary_roundtrip_and_state():
    tok = WordTokenizer().fit('b a c a b a, d!', max_vocab=6, min_count=1)
    assert tok.itos == ['<pad>', '<unk>', '<eos>', 'a', 'b', '!'] and tok.vocab_size == 6   # by count, then alphabetical
    assert (tok.PAD, tok.UNK, tok.EOS) == (0, 1, 2) and tok.stoi['a'] == 3
    assert tok.encode('A b C') == [3, 4, 1]
    assert tok.decode(tok.encode('B  a !')) == 'b a !'
    assert tok.decode(torch.tensor([3, 2])) == 'a <eos>'
    assert WordTokenizer().fit('x x y', min_count=2).itos == ['<pad>', '<unk>', '<eos>', 'x']
    clone = WordTokenizer.from_state_dict(tok.state_dict())
    assert clone.itos == tok.itos and clone.encode('c a') == tok.encode('c a')
    assert WordTokenizer.tokenize("x+=1 # don't") == ['x', '+', '=', '1', '#', 'don', "'", 't']


def test_tokenizer_errors():
    with pytest.raises(ValueError, match='not fitted'): WordTokenizer().encode('a')
    with pytest.raises(ValueError, match='not fitted'): WordTokenizer().decode([0])
    with pytest.raises(ValueError, match='not fitted'): WordTokenizer().state_dict()
    tok = WordTokenizer().fit('a b', min_count=1)
    with pytest.raises(ValueError, match=r'ids must lie in \[0, 5\)'): tok.decode([5])
    with pytest.raises(ValueError, match='text must be a str'): tok.encode(['a'])
    with pytest.raises(ValueError, match='max_vocab must be > 3'): WordTokenizer().fit('a', max_vocab=3)
    with pytest.raises(ValueError, match='min_count must be a positive int'): WordTokenizer().fit('a', min_count=0)
    with pytest.raises(ValueError, match="state must be a dict with key 'itos'"): WordTokenizer.from_state_dict(['a'])
    with pytest.raises(ValueError, match='itos must be distinct strings'): WordTokenizer(['<pad>', '<unk>', '<eos>', 'a', 'a'])


@pytest.fixture(scope='module')
def lm():
    return lm_data(seq_len=64, max_vocab=1024, seed=0)


def test_lm_data_windows_and_info(lm):
    info, tok = lm['info'], lm['tokenizer']
    assert lm['train'].dtype == lm['val'].dtype == torch.int64
    assert lm['train'].shape == (info['train_tokens'] // 65, 65) and lm['val'].shape == (info['val_tokens'] // 65, 65)
    assert tok.vocab_size == info['vocab_size'] <= 1024 and int(lm['train'].max()) < tok.vocab_size
    assert (lm['train'] == tok.EOS).any() and not (lm['train'] == tok.PAD).any()
    assert info['sha256'] == corpus_info()['sha256'] and 0 < info['val_unk_rate'] < 0.2
    total = info['train_tokens'] + info['val_tokens']
    assert total == len(WordTokenizer.tokenize(text_corpus())) + info['n_topics']   # + one <eos> per topic
    assert 0.05 < info['val_tokens'] / total < 0.2


def test_lm_data_split_is_disjoint_by_topic_group_and_tokenizer_sees_train_only(lm):
    info = lm['info']
    assert not set(info['val_topics']) & set(info['train_topics'])
    assert sorted(info['val_topics'] + info['train_topics']) == list(corpus_topics())
    val = set(info['val_topics'])
    for g in topic_groups():
        assert len({k in val for k in g}) == 1, f"topic group split across train and val: {g}"
    topics = corpus_topics()
    train_words = set(WordTokenizer.tokenize(' '.join(topics[k] for k in info['train_topics'])))
    assert set(lm['tokenizer'].itos[3:]) <= train_words, "the vocabulary must come from the training topics only"
    para = lambda names: {' '.join(p.split()) for k in names for p in re.split(r'\n\s*\n', topics[k]) if len(' '.join(p.split())) >= 80}
    assert not para(info['val_topics']) & para(info['train_topics'])


def test_lm_data_is_deterministic_under_a_seed(lm):
    again = lm_data(seq_len=64, max_vocab=1024, seed=0)
    assert torch.equal(again['train'], lm['train']) and torch.equal(again['val'], lm['val'])
    assert again['tokenizer'].itos == lm['tokenizer'].itos
    other = lm_data(seq_len=64, max_vocab=1024, seed=1)
    assert other['info']['val_topics'] != lm['info']['val_topics']


def test_lm_data_bad_arguments():
    with pytest.raises(ValueError, match='seq_len must be a positive int'): lm_data(0)
    with pytest.raises(ValueError, match='seq_len must be <'): lm_data(10**6)
    with pytest.raises(ValueError, match=r'val_fraction must be a number in \(0, 1\)'): lm_data(32, val_fraction=0)
    with pytest.raises(ValueError, match='max_vocab must be > 3'): lm_data(32, max_vocab=3)
    with pytest.raises(ValueError, match='seed must be a non-negative int'): lm_data(32, seed=-2)
