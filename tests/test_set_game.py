"""Chapter 4 (SET) public API: the deck, the embedder cache, leak-free triples, the symbolic baseline, transplanting relations."""
import itertools
import math
import pandas as pd
import pytest
import torch
import relbook.set_game as sg
from relbook.set_game import (COLORS, SHADINGS, SHAPES, EmbedderConfig, CardCNN, AttributeBits, SymbolicMLP, SET_ABSTRACTOR,
                              render_card, deck, card_index, augment_cards, attribute_bits, card_embeddings, train_embedder,
                              is_set, all_triples, set_triples, split_triples, sample_triples, set_data, unordered_key,
                              set_bits, pair_data, set_model, transplant_relation, mean_acc,
                              set_classification_trial, set_modular_trial, pretrain_relations, SET_MODELS, MODULAR_MODELS,
                              official_triples, official_set_data, sampled_data, ordered_key, seen_sets, leak_stats,
                              set_sampling_trial, SAMPLINGS)
from relbook.abstractor import AbstractorClassifier
from dataclasses import replace


def _fake_embeddings(seed=0, cfg=EmbedderConfig()):
    "Put random 'embeddings' where card_embeddings looks for its cache, so tests need not train the CNN."
    path = sg._embedder_path(seed, cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    E = torch.randn(81, 64, generator=torch.Generator().manual_seed(seed)).tanh()
    torch.save({'embeddings': E}, path)
    return E


def test_render_card_shape_range_and_errors():
    img = render_card('purple', 3, 'striped', 'squiggle')
    assert img.shape == (70, 50, 3) and img.dtype == 'float32' and 0 <= img.min() and img.max() <= 1
    assert render_card('red', 1, 'solid', 'oval', size=(35, 25), ss=2).shape == (35, 25, 3)
    assert (img[:, :, 1] < 0.5).any(), "purple ink must be drawn"
    with pytest.raises(ValueError, match='shading must be one of'):
        render_card('red', 1, 'dotted', 'oval')
    with pytest.raises(ValueError, match='ss must be a positive int'):
        render_card('red', 1, 'solid', 'oval', ss=0)
    with pytest.raises(ValueError, match=r'size must be \(H, W\)'):
        render_card('red', 1, 'solid', 'oval', size=(70,))


def test_deck_order_and_distinct_cards():
    images, attrs = deck()
    assert images.shape == (81, 70, 50, 3) and attrs.shape == (81, 4) and attrs.dtype == torch.long
    assert torch.equal(card_index(attrs), torch.arange(81))
    c, n, s, h = attrs[50].tolist()
    assert torch.equal(images[50], torch.from_numpy(render_card(COLORS[c], n + 1, SHADINGS[s], SHAPES[h])))
    assert len({im.numpy().tobytes() for im in images}) == 81
    images[0] += 1                                   # deck() hands out copies: the cache is not corrupted
    assert deck()[0].max() <= 1


def test_is_set_matches_definition_and_counts():
    attrs = deck()[1]
    T = all_triples()
    assert len(T) == math.comb(81, 3)
    lab = is_set(attrs[T])
    A = attrs[T]
    same = lambda i, j: A[:, i] == A[:, j]
    definition = ((same(0, 1) & same(0, 2)) | (~same(0, 1) & ~same(0, 2) & ~same(1, 2))).all(-1)
    assert torch.equal(lab, definition) and int(lab.sum()) == 1080
    assert set_triples().shape == (1080, 3)
    perm = A[:, [2, 0, 1]]                            # the rule ignores the order of the cards
    assert torch.equal(is_set(perm), lab)
    assert is_set(attrs[T].view(4, -1, 3, 4)).shape == (4, len(T) // 4)
    with pytest.raises(ValueError, match=r'attrs must have shape \(\.\.\., 3, 4\)'):
        is_set(torch.zeros(3, 4, dtype=torch.long)[None, :2])


@pytest.mark.parametrize('value', [float('nan'), 5, -1, 0.5])
def test_attribute_values_outside_0_1_2_are_refused(value):
    "is_set, set_bits, card_index and pair_data answered silently (False, zero bits, index 120, 'n must be <= 0') before."
    A = deck()[1][torch.tensor([[0, 40, 80]])].to(torch.float32 if isinstance(value, float) else torch.long)
    A[0, 2, 0] = value
    for fn in (is_set, set_bits, lambda a: card_index(a[:, 2])):
        with pytest.raises(ValueError, match=r'attrs must hold attribute values in \{0, 1, 2\}'):
            fn(A)
    deck_attrs = deck()[1].to(A.dtype); deck_attrs[5, 1] = value
    with pytest.raises(ValueError, match=r'attrs must hold attribute values in \{0, 1, 2\}'):
        pair_data(deck_attrs, 0, 10)


def test_split_is_disjoint_and_complete():
    pools = split_triples(3)
    keys = torch.cat([unordered_key(p[k]) for p in pools.values() for k in ('sets', 'non_sets')])
    assert len(keys) == len(keys.unique()) == 85320
    assert [len(p['sets']) for p in pools.values()] == [540, 216, 324]
    attrs = deck()[1]
    for p in pools.values():
        assert is_set(attrs[p['sets']]).all() and not is_set(attrs[p['non_sets']]).any()
    assert not torch.equal(split_triples(3)['test']['sets'], split_triples(4)['test']['sets'])
    with pytest.raises(ValueError, match='fractions must sum to 1'):
        split_triples(0, {'train': 0.5, 'test': 0.2})
    for bad in ({'train': 1.2, 'val': -0.2, 'test': 0.0}, {'train': float('nan'), 'val': 0.5, 'test': 0.5}):   # summed to 1 (or NaN)
        with pytest.raises(ValueError, match=r'fractions must be shares in \[0, 1\]'):
            split_triples(0, bad)


@pytest.mark.parametrize('n', [7, 1080, 5000])
def test_sampled_triples_are_balanced_verified_and_leak_free(n):
    attrs = deck()[1]
    data = set_data(n, seed=1)
    idx, y = data['train']
    assert idx.shape == (n, 3) and int(y.sum()) == n // 2
    for i, lab in data.values():
        assert torch.equal(is_set(attrs[i]).long(), lab)
    train_keys = set(unordered_key(idx).tolist())
    for split in ('val', 'test'):
        assert not train_keys & set(unordered_key(data[split][0]).tolist())
    pos = idx[y == 1]
    assert len(unordered_key(pos).unique()) == min(n // 2, 540)
    assert len({tuple(t) for t in pos.tolist()}) == n // 2            # no ordered triple repeats
    assert torch.equal(set_data(n, seed=1)['train'][0], idx)           # deterministic in the seed


def test_sample_triples_errors():
    pools = split_triples(0)
    with pytest.raises(ValueError, match='SET orderings'):
        sample_triples(pools['test'], 2 * 6 * 324 + 2)
    with pytest.raises(ValueError, match='n must be a positive int'):
        sample_triples(pools['test'], 0)


def test_official_triples_follow_the_official_generator():
    attrs = deck()[1]
    idx, y = official_triples(4000, torch.Generator().manual_seed(2))
    assert idx.shape == (4000, 3) and y.tolist()[:4] == [1, 0, 1, 0] and int(y.sum()) == 2000
    pos, neg = idx[0::2], idx[1::2]
    assert is_set(attrs[pos]).all()                                      # positives are SETs ...
    assert len(unordered_key(pos).unique()) < 2000                       # ... drawn with replacement ...
    assert len(ordered_key(pos).unique()) == len(unordered_key(pos).unique())   # ... each in one fixed card order
    assert not (neg[:, :, None] == pos[:, None, :]).any()                 # a negative avoids its SET's cards
    assert (neg.sort(-1).values.diff(dim=-1) > 0).all()                   # three distinct cards
    assert 0 < int(is_set(attrs[neg]).sum()) < 0.03 * len(neg)            # unchecked: about 1 in 79 is a SET labelled 0
    assert torch.equal(official_triples(4000, torch.Generator().manual_seed(2))[0], idx)
    with pytest.raises(ValueError, match='n must be an even int'):
        official_triples(7)


def test_official_split_leaks_and_ours_does_not():
    data = official_set_data(3000, seed=4)
    assert [len(data[k][1]) for k in ('train', 'val', 'test')] == [3000, 1000, 2000]
    s = leak_stats(data)
    assert abs(s['test_sets_seen'] - (1 - (1 - 1 / 1080) ** 1500)) < 0.06 and 0 < s['neg_sets_test'] < 0.03
    seen = seen_sets(data)
    assert not seen[data['test'][1] == 0].any()                            # only SETs can be "seen"
    assert torch.equal(official_set_data(1000, 4)['train'][0], official_set_data(3000, 4)['train'][0][:1000])   # nested
    assert torch.equal(official_set_data(1000, 4)['test'][0], data['test'][0])                              # one test set per seed
    ours = leak_stats(sampled_data('ours', 3000, 4))
    assert ours == {'test_sets_seen': 0.0, 'neg_sets_train': 0.0, 'neg_sets_test': 0.0}
    assert SAMPLINGS == ('ours', 'official')
    with pytest.raises(ValueError, match=r'n_train must be an int in 1\.\.7000'):
        official_set_data(8000, 0)
    with pytest.raises(ValueError, match='sampling must be one of'):
        sampled_data('tf', 100, 0)


def test_set_bits_determine_the_label():
    attrs = deck()[1]
    A = attrs[all_triples()]
    bits = set_bits(A)
    assert bits.shape == (85320, 12)
    rule = (bits.view(-1, 4, 3).sum(-1) % 3 == 0).all(-1)
    assert torch.equal(rule, is_set(A))
    # bit 3k + p: attribute-major, pairs (0,1), (0,2), (1,2)
    t = torch.tensor([[[0, 0, 0, 0], [0, 1, 0, 0], [1, 1, 0, 0]]])
    assert set_bits(t)[0].tolist() == [1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1]
    assert SymbolicMLP()(bits[:3]).shape == (3, 2)
    with pytest.raises(ValueError, match='bits must have shape'):
        SymbolicMLP()(bits[:3, :11])


def test_pair_data():
    attrs = deck()[1]
    idx, y = pair_data(attrs, 0, 2000, torch.Generator().manual_seed(0))
    assert idx.shape == (2000, 2) and int(y.sum()) == 1000
    assert torch.equal((attrs[idx[:, 0], 0] == attrs[idx[:, 1], 0]).long(), y)
    assert len(set(map(tuple, idx.sort(-1).values.tolist()))) == 2000     # distinct pairs
    with pytest.raises(ValueError, match='n must be <= 2106'):
        pair_data(attrs, 1, 3000)


def test_models_and_transplant():
    torch.manual_seed(0)
    x = torch.randn(5, 3, 64)
    for name in SET_MODELS:
        assert set_model(name)(x).shape == (5, 2)
    four = set_model('Abstractor')
    one = AbstractorClassifier(64, 2, 2, replace(SET_ABSTRACTOR, n_heads=1))
    before = four.abstractor.layers[0].rca.w_q.weight.detach().clone()
    transplant_relation(one, four, 3)
    after = four.abstractor.layers[0].rca.w_q.weight.detach()
    assert torch.equal(after[48:], one.abstractor.layers[0].rca.w_q.weight.detach())
    assert torch.equal(after[:48], before[:48])                        # the other heads are untouched
    assert isinstance(set_model('CoRelNet (no softmax)').head, torch.nn.Linear)          # the paper's linear readout
    assert isinstance(set_model('CoRelNet (no softmax, MLP readout)').head, torch.nn.Sequential)
    asym = AbstractorClassifier(64, 2, 2, replace(SET_ABSTRACTOR, n_heads=1, symmetric=False))
    with pytest.raises(ValueError, match='src and dst relations differ'):
        transplant_relation(asym, four, 0)
    with pytest.raises(ValueError, match=r'head must be an int in \[0, 4\)'):
        transplant_relation(one, four, 4)
    with pytest.raises(ValueError, match=r'head must be an int in \[0, 4\), got True'):   # True == 1 passed before
        transplant_relation(one, four, True)
    with pytest.raises(ValueError, match=r'attribute must be an int in \[0, 4\)'):
        pair_data(deck()[1], True, 10)


def test_cnn_augment_and_task():
    cnn = CardCNN()
    x = deck()[0][:6].permute(0, 3, 1, 2)
    assert cnn(x).shape == (6, 12) and cnn.embed(x).shape == (6, 64) and cnn.embed(x).abs().max() <= 1
    g = lambda: torch.Generator().manual_seed(5)
    a, b = augment_cards(x, generator=g()), augment_cards(x, generator=g())
    assert torch.equal(a, b) and a.shape == x.shape and 0 <= a.min() and a.max() <= 1 and not torch.equal(a, x)
    assert (augment_cards(x, EmbedderConfig(shift=0, zoom=0, jitter=0, noise=0)) - x).abs().max() < 1e-5   # identity
    attrs = deck()[1][:6]
    assert attribute_bits(attrs).sum(-1).eq(4).all()
    m = AttributeBits().evaluate(cnn, (x, attrs))
    assert set(m) == {'loss', 'acc', 'attr_acc'} and 0 <= m['acc'] <= 1
    with pytest.raises(ValueError, match='noise must be a finite number >= 0'):
        EmbedderConfig(noise=-1)
    for k, v in (('lr', float('nan')), ('lr', -1.0), ('lr', 0.0)):
        with pytest.raises(ValueError, match='lr must be a positive finite number'):
            EmbedderConfig(**{k: v})
    with pytest.raises(ValueError, match='shift must be a finite number >= 0'):
        EmbedderConfig(shift=float('nan'))


def test_embedder_training_learns_and_cache_is_used():
    _, metrics = train_embedder(0, EmbedderConfig(steps=40))
    assert metrics['attr_acc'] > 0.5                                   # well above chance (1/3) after 40 steps
    with pytest.raises(RuntimeError, match='exactly right'):
        card_embeddings(7, EmbedderConfig(steps=5))
    E = _fake_embeddings(0)
    assert torch.equal(card_embeddings(0), E)                          # read from the cache, not retrained
    with pytest.raises(ValueError, match='seed must be an int'):
        card_embeddings(-1)


def test_trials_run_and_report():
    _fake_embeddings(0)
    r = set_classification_trial('CoRelNet', 64, seed=0, epochs=1, patience=None)
    assert {'test_acc', 'test_loss', 'best_epoch', 'n_params'} <= set(r) and 0 <= r['test_acc'] <= 1
    pretrain_relations.cache_clear()
    r = set_modular_trial('Abstractor (pre-learned relations)', 64, seed=0, epochs=1, patience=None, n_pairs=600, pair_epochs=1)
    assert {'pair_acc_color', 'pair_acc_shape'} <= set(r)
    r = set_modular_trial('Symbolic MLP', 64, seed=0, epochs=1, patience=None, n_pairs=600, pair_epochs=1)
    assert r['n_params'] == sum(p.numel() for p in SymbolicMLP().parameters())
    with pytest.raises(ValueError, match='model must be one of'):
        set_modular_trial('Transformer', 64, seed=0, epochs=1, patience=None, n_pairs=600, pair_epochs=1)
    r = set_sampling_trial('CoRelNet (no softmax)', 'official', 500, seed=0, epochs=1, patience=None)
    assert {'test_acc', 'test_acc_seen', 'test_acc_unseen', 'test_acc_neg', 'test_sets_seen', 'neg_sets_test'} <= set(r)
    assert 0 < r['test_sets_seen'] < 1 and all(0 <= r[k] <= 1 for k in ('test_acc_seen', 'test_acc_unseen', 'test_acc_neg'))
    # the three kinds partition the test set: their accuracies, weighted by their counts, give the test accuracy back
    d = sampled_data('official', 500, 0); y = d['test'][1]; seen = seen_sets(d)
    n = {'seen': int(seen.sum()), 'unseen': int(((y == 1) & ~seen).sum()), 'neg': int((y == 0).sum())}
    assert sum(n.values()) == len(y) and min(n.values()) > 0
    assert r['test_acc'] == pytest.approx(sum(n[k] * r[f'test_acc_{k}'] for k in n) / len(y), abs=1e-6), (r, n)
    assert r['test_sets_seen'] == pytest.approx(n['seen'] / (n['seen'] + n['unseen']))
    torch.manual_seed(1); ours = set_sampling_trial('CoRelNet (no softmax)', 'ours', 64, seed=0, epochs=2, patience=None)
    assert ours['test_acc_seen'] is None and ours['test_sets_seen'] == 0
    torch.manual_seed(1); same = set_classification_trial('CoRelNet (no softmax)', 64, seed=0, epochs=2, patience=None)
    assert ours['test_loss'] == same['test_loss']                     # our sampling repeats Experiment 1's trial exactly


def test_mean_acc():
    df = pd.DataFrame({'model': ['A'] * 3 + ['B'], 'n_train': [10, 10, 20, 10], 'test_acc': [0.5, 0.7, 0.9, 0.4]})
    m, se = mean_acc(df, 'A', 10)
    assert m == pytest.approx(0.6) and se == pytest.approx(0.1)
    assert mean_acc(df, 'A', 20) == (0.9, 0.0)
    nan_row = pd.concat([df, pd.DataFrame({'model': ['A'], 'n_train': [10], 'test_acc': [float('nan')]})])
    assert all(math.isnan(v) for v in mean_acc(nan_row, 'A', 10)), "NaN in must give NaN out, never a finite mean"
    with pytest.raises(ValueError, match="no rows of model='C' at n_train=10"):
        mean_acc(df, 'C', 10)


def _rows(models, seeds, sizes, acc):
    "Synthetic result rows: acc(model, seed, n) -> test accuracy; trained to epoch 10 of a 200-epoch budget."
    return pd.DataFrame([dict(model=m, seed=s, n_train=n, test_acc=acc(m, s, n), best_epoch=10, epochs=200)
                         for m in models for s in seeds for n in sizes])


def test_claims_are_declared_once_and_judge_synthetic_rows():
    from relbook.evidence import CLAIMS
    ours = {k: c for k, c in CLAIMS.items() if c.chapter == '04_set'}
    assert len(ours) == 11 and all(c.section.startswith('Experiment ') for c in ours.values())
    lift = {'Abstractor': 0.4, 'CoRelNet (no softmax, MLP readout)': 0.3}
    mlp_spread = lambda m, s: 0.002 * s * (m == 'CoRelNet (no softmax, MLP readout)')     # per-seed differences not all equal
    rows = _rows(SET_MODELS, range(4), (250, 2000), lambda m, s, n: 0.5 + lift.get(m, 0) * (n == 2000) + 0.005 * s + mlp_spread(m, s))
    ev = {k: c.evaluate(rows) for k, c in ours.items() if c.experiments == ('set_classification',)}
    # the relation-dimension claim reads both sweeps' rows at the largest size: +0.45 reaches its size 0.4, +0.1 does not
    four = 'CoRelNet (no softmax, 4 relations)'
    for gain, size in ((0.45, 'reached'), (0.1, 'not reached')):
        dims = _rows(('CoRelNet (no softmax)', four), range(4), (250, 2000),
                     lambda m, s, n: 0.5 + (gain + 0.002 * s) * (m == four) + 0.005 * s)     # gain + 0.003 on average over the seeds
        c = ours['set-more-dimensions-rescue-corelnet'].evaluate(dims).comparison
        assert c.verdict == 'supports the paper' and c.size == size and c.effect == pytest.approx(gain + 0.003)
    assert ev['set-abstractor-learns'].comparison.verdict == 'supports the paper'           # 0.9 at 2000 triples
    assert ev['set-abstractor-learns'].comparison.effect == pytest.approx(0.4075)
    assert ev['set-abstractor-beats-corelnet'].comparison.effect == pytest.approx(0.2)      # mean over both sizes
    assert ev['set-corelnet-stuck-at-chance'].comparison.verdict == 'supports the paper'
    assert ev['set-one-dimension-too-few'].comparison.verdict == 'contradicts the paper'   # +0.15 > margin 0.05
    # one seed (smoke): no verdict, and no crash
    one = _rows(MODULAR_MODELS, [0], (64, 256), lambda m, s, n: 0.6)
    for c in ours.values():
        if c.experiments == ('set_modular',):
            assert c.evaluate(one).comparison.verdict == 'insufficient data'
    # the official model's claim reads both sweeps' rows: within ±0.05 of the symbolic MLP over 4 seeds, and 0.1 below it
    off = sg.OFFICIAL_MODULAR[0]
    for lag, verdict in ((0.02, 'supports the paper'), (0.1, 'contradicts the paper')):
        rows = _rows(('Symbolic MLP', off), range(4), (100, 1000), lambda m, s, n: 0.99 - (lag - 0.001 * s) * (m == off) + 0.002 * s)
        assert ours['set-official-modular-near-symbolic'].evaluate(rows).comparison.verdict == verdict


def test_official_modular_model_freezes_the_transplanted_relations():
    "The control of Experiment 2: the official SimpleAbstractorMH — fixed embedder and symbols, sigmoid relations, frozen Q/K."
    emb = sg.official_embedder(0)
    assert not emb.weight.requires_grad and torch.equal(emb.weight, sg.official_embedder(0).weight)   # one per seed, reproducible
    assert torch.equal(emb.bias, torch.zeros(64))
    net, pair = sg.OfficialModularAbstractor(emb), sg.OfficialPairAbstractor(emb)
    x = torch.randn(5, 3, 64)
    R = net.relations(x)
    assert R.shape == (5, 4, 3, 3) and ((R >= 0) & (R <= 1)).all() and net(x).shape == (5, 2)
    assert pair(torch.randn(5, 2, 64)).shape == (5, 2)
    with pytest.raises(ValueError, match='x'):
        net(torch.randn(5, 2, 64))
    sg.transplant_pair_relation(pair, net, 2)
    assert torch.equal(net.q[2].weight, pair.q.weight) and torch.equal(net.k[2].bias, pair.k.bias)
    assert not net.q[2].weight.requires_grad and net.q[1].weight.requires_grad
    with pytest.raises(ValueError, match='one embedder'):
        sg.transplant_pair_relation(sg.OfficialPairAbstractor(sg.official_embedder(1)), net, 0)
    # only the MLP on the symbols trains once every head is transplanted: 180·128+128 + 128·64+64 + 64·2+2
    for h in range(4): sg.transplant_pair_relation(pair, net, h)
    assert sum(p.numel() for p in net.parameters() if p.requires_grad) == 31_554
    assert 'symbols' in dict(net.named_buffers()) and not any(n.startswith('symbols') for n, _ in net.named_parameters())


def test_official_modular_trial_runs_and_reports():
    _fake_embeddings(0)
    sg.pretrain_official_relations.cache_clear()
    r = sg.set_modular_official_trial(sg.OFFICIAL_MODULAR[0], 64, seed=0, epochs=1, patience=None, n_pairs=600, pair_epochs=1)
    assert {'test_acc', 'pair_acc_color', 'pair_acc_shape'} <= set(r) and r['n_trainable'] == 31_554
    r = sg.set_modular_official_trial(sg.OFFICIAL_MODULAR[1], 64, seed=0, epochs=1, patience=None, n_pairs=600, pair_epochs=1)
    assert r['n_trainable'] == r['n_params'] - 64 * 65 and 0 <= r['test_acc'] <= 1          # all but the fixed embedder
    with pytest.raises(ValueError, match='model must be one of'):
        sg.set_modular_official_trial('Symbolic MLP', 64, seed=0, epochs=1, patience=None, n_pairs=600, pair_epochs=1)


def test_freeze_control_twins_start_alike_and_differ_only_in_what_trains():
    "The freezing control: each variant is its twin of the same seed, with the transplanted relations frozen or not."
    _fake_embeddings(0)
    sg.pretrain_relations.cache_clear(); sg.pretrain_official_relations.cache_clear()
    fx = dict(seed=0, n_pairs=600, pair_epochs=1)
    pairs = ((sg.FREEZE_CONTROL[0], sg.modular_model, sg.MODULAR_MODELS[0]),
             (sg.FREEZE_CONTROL[1], sg.official_modular_model, sg.OFFICIAL_MODULAR[0]))
    for variant, build, twin_name in pairs:
        torch.manual_seed(3); net, extra = sg.freeze_control_model(variant, **fx)
        torch.manual_seed(3); twin, twin_extra = build(twin_name, **fx)
        a, b = net.state_dict(), twin.state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a) and extra == twin_extra
        changed = {n for (n, p), (_, q) in zip(net.named_parameters(), twin.named_parameters()) if p.requires_grad != q.requires_grad}
        if variant == sg.FREEZE_CONTROL[0]:
            assert changed == {'abstractor.layers.0.rca.w_q.weight'} and not net.abstractor.layers[0].rca.w_q.weight.requires_grad
        else:
            assert changed == {f'{m}.{h}.{w}' for m in 'qk' for h in range(4) for w in ('weight', 'bias')}
            assert not net.embedder.weight.requires_grad and 'symbols' in dict(net.named_buffers())
    r = sg.set_modular_freeze_trial(sg.FREEZE_CONTROL[0], 64, seed=0, epochs=1, patience=None, n_pairs=600, pair_epochs=1)
    assert r['n_trainable'] == r['n_params'] - 64 * 64 and 0 <= r['test_acc'] <= 1 and 'pair_acc_color' in r
    with pytest.raises(ValueError, match='model must be one of'):
        sg.freeze_control_model(sg.OFFICIAL_MODULAR[0], **fx)


def test_pair_bias_trial_is_the_classification_trial_split_by_a_shared_pair():
    """set_pair_bias: the same training as Experiment 1's trial (same test accuracy, in-process), its test calls split by
    whether a test triple shares a card pair with a training SET (checked against a brute force over the pairs), and the
    split never lets a test SET share one."""
    from relbook.harness import seed_everything
    _fake_embeddings(0)
    d = sg.set_data(64, 0)
    seen = {frozenset(p) for r in d['train'][0][d['train'][1] == 1].tolist() for p in itertools.combinations(r, 2)}
    brute = torch.tensor([any(frozenset(p) in seen for p in itertools.combinations(r, 2)) for r in d['test'][0].tolist()])
    s, n = sg.shares_training_pair(d)
    y = y_test = d['test'][1]
    assert torch.equal(s, brute[y == 1]) and torch.equal(n, brute[y == 0]) and not s.any() and n.any() and not n.all()
    fx = dict(epochs=2, patience=None)
    for m in ('CoRelNet (no softmax, 4 relations)', 'CoRelNet (no softmax, MLP readout)'):
        seed_everything(0); a = sg.set_classification_trial(m, 64, 0, **fx)
        seed_everything(0); b = sg.pair_bias_trial(m, 64, 0, **fx)
        assert a['test_acc'] == b['test_acc'] and b['set_shared'] == 0 and b['n_shared'] == int(n.sum())
        # the test accuracy is the three rates put together (test SETs and non-SETs are balanced)
        fp = (b['fp_shared'] * b['n_shared'] + b['fp_other'] * b['n_other']) / (b['n_shared'] + b['n_other'])
        assert abs(b['test_acc'] - (b['tp'] + 1 - fp) / 2) < 1e-6, (b, fp)
    with pytest.raises(ValueError, match='model must be one of'):
        sg.pair_bias_trial('Abstractor', 64, 0, **fx)
    # the rates themselves, on calls made up so that each rate differs (a swap of any two would show)
    y = torch.tensor([1, 1, 1, 1, 0, 0, 0, 0, 0, 0])
    called = torch.tensor([1, 1, 1, 0, 1, 1, 0, 0, 0, 1]).bool()     # SETs: 3 of 4; non-SETs: [1, 1, 0, 0, 0, 1]
    hit = torch.tensor([1, 1, 0, 0, 0, 0]).bool()                    # the first two non-SETs share a pair: both called SETs
    r = sg.pair_rates(called, y, hit)
    assert r == {'tp': 0.75, 'fp_shared': 1.0, 'fp_other': 0.25, 'n_shared': 2, 'n_other': 4}, r
    assert math.isnan(sg.pair_rates(called, y, torch.zeros(6, dtype=torch.bool))['fp_shared'])
    with pytest.raises(ValueError, match='non_hit must mark each'):
        sg.pair_rates(called, y, hit[:5])
    neg = torch.tensor([1, 1, 0, 0]).bool()                          # SETs: the first two share a pair with a training non-SET
    r = sg.pair_rates(called, y, hit, neg)                           # SETs called [1, 1, 1, 0]
    assert (r['tp_neg_shared'], r['tp_neg_other'], r['n_set_neg_shared'], r['n_set_neg_other']) == (1.0, 0.5, 2, 2), r
    with pytest.raises(ValueError, match='set_neg must have shape'): sg.pair_rates(called, y, hit, neg[:3])
    # shares_training_pair with label 0: the training non-SETs' pairs, against a brute force
    seen0 = {frozenset(p) for r in d['train'][0][d['train'][1] == 0].tolist() for p in itertools.combinations(r, 2)}
    brute0 = torch.tensor([any(frozenset(p) in seen0 for p in itertools.combinations(r, 2)) for r in d['test'][0].tolist()])
    s0, n0 = sg.shares_training_pair(d, label=0)
    assert torch.equal(s0, brute0[y_test == 1]) and torch.equal(n0, brute0[y_test == 0])
    with pytest.raises(ValueError, match='label must be one of'): sg.shares_training_pair(d, label=2)



def test_set_payback_balance_of_a_linear_readout_and_its_mirror(monkeypatch):
    """order_averaged_margin averages the six card orders; set_payback: for a linear readout of relations (any dimension,
    untrained) all SETs and all non-SETs have the same mean margin, so the held-out SETs mirror the training pool's; a
    softmax or MLP readout breaks the balance; the pair-bias trial stores the fields; bad input is refused by name."""
    _fake_embeddings(0)
    torch.manual_seed(0)
    T, pools = sg.all_triples(), sg.split_triples(0)
    idx = T[torch.randperm(len(T), generator=torch.Generator().manual_seed(1))[:50]]
    net = sg.set_model('CoRelNet (no softmax, MLP readout)').eval()
    E, attrs = sg.card_embeddings(0), sg.deck()[1]
    with torch.no_grad():
        by_hand = sum((lambda lg: (lg[:, 1] - lg[:, 0]).double())(net(E[idx[:, p]])) for p in sg.PERMS3) / 6
    m = sg.order_averaged_margin(net, 'CoRelNet (no softmax, MLP readout)', idx, batch_size=7)
    assert torch.allclose(m, by_hand, atol=1e-6)
    assert torch.allclose(sg.order_averaged_margin(net, 'CoRelNet (no softmax, MLP readout)', idx[:, [2, 0, 1]]), m, atol=1e-6)
    for model in ('CoRelNet (no softmax)', 'CoRelNet (no softmax, 4 relations)'):
        p = sg.set_payback(sg.order_averaged_margin(sg.set_model(model), model, T), pools)
        assert abs(p['gap_all']) < 1e-5 and abs(p['heldout_sets'] + p['train_sets']) < 1e-5 and p['non_sd'] > 0, (model, p)
        assert abs(p['train_sets']) > 1e-4, p                          # ... and not because every mean is 0
    for model in ('CoRelNet', 'CoRelNet (no softmax, MLP readout)'):
        p = sg.set_payback(sg.order_averaged_margin(sg.set_model(model), model, T), pools)
        assert abs(p['gap_all']) > 1e-4, (model, p)                  # 10 times the linear readouts' bound
    # test_sets by hand: the test pool's SETs' mean margin minus all non-SETs', in their sd (a swap of pools would show)
    m4 = sg.order_averaged_margin(sg.set_model('CoRelNet (no softmax)'), 'CoRelNet (no softmax)', T)
    lab, key = sg.is_set(sg.deck()[1][T]), sg.unordered_key(T)
    hand = lambda pool: float(m4[torch.isin(key, sg.unordered_key(pools[pool]['sets']))].mean() - m4[~lab].mean()) / float(m4[~lab].std())
    p = sg.set_payback(m4, pools)
    assert abs(p['test_sets'] - hand('test')) < 1e-9 and abs(p['train_sets'] - hand('train')) < 1e-9 and abs(hand('val') - hand('test')) > 1e-4
    was = sg.set_model('CoRelNet').train(); sg.order_averaged_margin(was, 'CoRelNet', idx); assert was.training   # mode restored
    # shift_removed_acc: SETs' margins moved by -shift, the non-SETs' calls kept (a sign error would show)
    mg, yy = torch.tensor([1.0, -1.0, 0.5, -0.5]), torch.tensor([1, 1, 0, 0])
    assert sg.shift_removed_acc(mg, yy, 0.0) == 0.5 and sg.shift_removed_acc(mg, yy, -2.0) == 0.75 and sg.shift_removed_acc(mg, yy, 2.0) == 0.25
    real, seen = sg.shift_removed_acc, {}                 # the trial's call: the test pool's shift, its margins and labels
    monkeypatch.setattr(sg, 'shift_removed_acc', lambda m, y, shift: seen.update(m=m, y=y, shift=shift) or real(m, y, shift))
    r = sg.pair_bias_trial('CoRelNet (no softmax)', 64, 0, epochs=2, patience=None)
    assert abs(r['pay_gap_all']) < 1e-5 and abs(r['pay_heldout_sets'] + r['pay_train_sets']) < 1e-5, r
    assert seen['shift'] == pytest.approx(r['pay_test_sets'] * r['pay_non_sd']) and r['acc_shift_removed'] == real(seen['m'], seen['y'], seen['shift'])
    assert real(seen['m'], seen['y'], 0.0) == pytest.approx(r['test_acc'])       # unshifted: the trial's own test accuracy
    assert torch.equal(seen['y'], sg.set_data(64, 0)['test'][1])
    with pytest.raises(ValueError, match='y must hold both labels'): sg.shift_removed_acc(mg, torch.ones(4, dtype=torch.long), 0.0)
    with pytest.raises(ValueError, match='shift must be'): sg.shift_removed_acc(mg, yy, float('nan'))
    with pytest.raises(ValueError, match='y must have shape'): sg.shift_removed_acc(mg, yy[:3], 0.0)
    good = sg.order_averaged_margin(net, 'CoRelNet (no softmax, MLP readout)', T)
    with pytest.raises(ValueError, match='margin must have shape'): sg.set_payback(good[:-1], pools)
    with pytest.raises(ValueError, match='margin must be finite'): sg.set_payback(torch.full_like(good, float('nan')), pools)
    with pytest.raises(ValueError, match='margin must vary'): sg.set_payback(torch.zeros_like(good), pools)
    with pytest.raises(ValueError, match="pools must be split_triples' dict"): sg.set_payback(good, {'train': None})
    with pytest.raises(ValueError, match='idx must hold card indices'): sg.order_averaged_margin(net, 'CoRelNet', idx + 81)
    with pytest.raises(ValueError, match='idx must have shape'): sg.order_averaged_margin(net, 'CoRelNet', idx[:, :2])
    with pytest.raises(ValueError, match='model must be one of'): sg.order_averaged_margin(net, 'MLP', idx)
    with pytest.raises(ValueError, match='idx must hold card indices'): sg.order_averaged_margin(net, 'CoRelNet', idx.float())
    with pytest.raises(ValueError, match='idx must hold card indices'): sg.order_averaged_margin(net, 'CoRelNet', idx - 81)
    with pytest.raises(ValueError, match='batch_size must be'): sg.order_averaged_margin(net, 'CoRelNet', idx, batch_size=0)
    with pytest.raises(ValueError, match="pools must be split_triples' dict"): sg.set_payback(good, [pools])
    with pytest.raises(ValueError, match="pools must be split_triples' dict"): sg.set_payback(good, {k: {'non_sets': v['non_sets']} for k, v in pools.items()})

def test_relation_drift_trial_is_its_sweeps_trial_with_each_heads_auc():
    """set_relation_drift: the same model and training as Experiment 2's trial (ours) and the freezing control's (official
    trainable), in-process, with each head's AUC before and after in [0.5, 1]; head_auc is 1 for a relation that separates
    its attribute perfectly and about 0.5 for noise."""
    from relbook.harness import seed_everything
    _fake_embeddings(0)
    sg.pretrain_relations.cache_clear(); sg.pretrain_official_relations.cache_clear()
    fx = dict(epochs=2, patience=None, n_pairs=600, pair_epochs=1)
    for m, twin in zip(sg.DRIFT_MODELS, (sg.set_modular_trial, sg.set_modular_freeze_trial)):
        seed_everything(0); a = twin(m, 64, 0, **fx)
        seed_everything(0); b = sg.relation_drift_trial(m, 64, 0, **fx)
        assert a['test_acc'] == b['test_acc'], m
        assert all(0.5 <= b[f'auc_{w}_{k}'] <= 1 for w in ('before', 'last', 'after') for k in sg.ATTRIBUTES), b
        # 'before' is the untrained-on-triples model's AUC, head by head in attribute order, on the seed's test triples
        seed_everything(0); net, _ = (sg.modular_model if m == sg.DRIFT_MODELS[0] else sg.freeze_control_model)(m, 0, 600, 1)
        idx = sg.set_data(64, 0)['test'][0]
        want = sg.head_auc(sg.triple_relations(net, sg.card_embeddings(0)[idx]), sg.set_bits(sg.deck()[1][idx]))
        assert [b[f'auc_before_{k}'] for k in sg.ATTRIBUTES] == [float(u) for u in want], m
        assert b['auc_triples'] == len(sg.set_data(64, 0)['test'][0])           # every test triple of the seed is scored
    # the last evaluation's AUCs are those of the model training ended with: with the best kept at the last step, the same
    seed_everything(0); c = sg.relation_drift_trial(sg.DRIFT_MODELS[0], 64, 0, **{**fx, 'epochs': 1})
    assert [c[f'auc_last_{k}'] for k in sg.ATTRIBUTES] == [c[f'auc_after_{k}'] for k in sg.ATTRIBUTES]
    attrs = sg.deck()[1][torch.randint(81, (500, 3), generator=torch.Generator().manual_seed(0))]
    bits = sg.set_bits(attrs)
    same = bits.view(-1, 4, 3)                                       # a perfect relation: 1 where the pair shares the value
    R = torch.zeros(500, 4, 3, 3)
    for p, (i, j) in enumerate(sg.PAIRS): R[:, :, i, j] = same[:, :, p]
    assert sg.head_auc(R, bits) == [1.0] * 4
    R_low = R.transpose(-1, -2)                                      # the same code below the diagonal only: an asymmetric relation
    assert sg.head_auc(R_low, bits) == [1.0] * 4
    noise = sg.head_auc(torch.randn(500, 4, 3, 3, generator=torch.Generator().manual_seed(1)), bits)
    assert all(0.5 <= v < 0.6 for v in noise), noise
    with pytest.raises(ValueError, match='model must be one of'):
        sg.relation_drift_trial('Symbolic MLP', 64, 0, **fx)


def test_pair_and_drift_helpers_refuse_bad_input_by_name():
    "Bad input to the two checks' helpers: a clear error naming the argument; NaN relations give no AUC."
    y, called = torch.tensor([1, 0, 0]), torch.tensor([True, False, True])
    with pytest.raises(ValueError, match='called must be a bool'): sg.pair_rates(torch.tensor([1, 0, 1]), y, torch.tensor([True, False]))
    with pytest.raises(ValueError, match='non_hit must be a bool'): sg.pair_rates(called, y, torch.tensor([1, 0]))
    with pytest.raises(ValueError, match='y must have shape'): sg.pair_rates(called, torch.tensor([1, 0]), torch.tensor([True]))
    with pytest.raises(ValueError, match="data must be a dict with 'train' and 'test'"): sg.shares_training_pair({'train': None})
    bits = torch.zeros(5, 12)
    with pytest.raises(ValueError, match='R must have shape'): sg.head_auc(torch.zeros(5, 3, 3, 3), bits)
    with pytest.raises(ValueError, match='bits must have shape'): sg.head_auc(torch.zeros(5, 4, 3, 3), torch.zeros(4, 12))
    with pytest.raises(ValueError, match='R must be finite'): sg.head_auc(torch.full((5, 4, 3, 3), float('nan')), bits)
