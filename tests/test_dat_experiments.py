"Tests of the DAT experiments' data paths and models (relbook.dat_experiments)."
import pytest
import torch
from relbook.datasets import write_cifar_batch, load_cifar
from relbook.dat_experiments import (vision_data, vision_model, vision_protocol, VISION_MODELS, DIGITS_TEST, dat_math_model, lm_model,
                                     lm_protocol, LM_MODELS)


def _write_cifar10(root, n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    folder = root / 'cifar-10-batches-py'
    for name in [f'data_batch_{i}' for i in range(1, 6)] + ['test_batch']:
        write_cifar_batch(folder / name, torch.randint(0, 256, (n, 3, 32, 32), generator=g, dtype=torch.uint8),
                          torch.arange(n) % 10)


def test_vision_data_cifar_from_written_files(tmp_path, monkeypatch):
    "The CIFAR recipe trains on every training image: no validation part; the official test set; black as it normalises."
    _write_cifar10(tmp_path)
    monkeypatch.setenv('RELBOOK_CIFAR', str(tmp_path))
    d = vision_data('cifar10', seed=0)
    assert 'val' not in d and len(d['train'][1]) == 5 * 40 and len(d['test'][1]) == 40
    assert d['patch'] == 4 and d['n_classes'] == 10
    assert abs(float(d['train'][0].mean())) < 0.05                       # normalised with the training statistics
    x = load_cifar(tmp_path, 'cifar10', 'train')[0].double()
    mean, std = x.mean((0, 2, 3)), x.std((0, 2, 3), correction=0)
    assert torch.allclose(d['black'].double(), -mean / std, atol=1e-5)   # a 0 pixel, normalised
    assert torch.equal(vision_data('cifar10', seed=3)['train'][1], d['train'][1])   # the same images for every seed
    net = vision_model('ViDAT', 32, d['patch'], 3, d['n_classes'], vision_protocol('smoke'))
    assert net(d['test'][0][:2]).shape == (2, 10)


def test_digits_keep_their_validation_split():
    d = vision_data('digits', seed=0)
    assert tuple(len(d[k][1]) for k in ('train', 'val', 'test')) == (1797 - 180 - DIGITS_TEST, 180, DIGITS_TEST)


def test_vision_data_cifar_needs_env(monkeypatch):
    monkeypatch.delenv('RELBOOK_CIFAR', raising=False)
    with pytest.raises(ValueError, match='RELBOOK_CIFAR'): vision_data('cifar10', 0)
    with pytest.raises(ValueError, match='dataset'): vision_data('mnist', 0)


def test_digits_and_models_build():
    d = vision_data('digits', seed=0)
    assert d['patch'] == 2 and d['train'][0].shape[1:] == (1, 8, 8)
    for m in VISION_MODELS:
        assert vision_model(m, 8, 2, 1, 10, vision_protocol('smoke'))(d['val'][0][:3]).shape == (3, 10)
    for m in ('Transformer', 'DAT'):
        net = dat_math_model(m, 2)
        assert net(torch.randint(3, 50, (2, 9)), torch.randint(3, 50, (2, 5))).shape[:2] == (2, 5)
    p = lm_protocol('smoke')
    for m in LM_MODELS:
        assert lm_model(m, 100, p)(torch.randint(0, 100, (2, 7))).shape == (2, 7, 100)
    with pytest.raises(ValueError, match='model'): dat_math_model('GPT', 2)


def test_relation_bias_of_each_experiment_is_explicit():
    "No relation-map bias anywhere (official); the language models have no bias at all (App. C.4)."
    math_attn = dat_math_model('DAT', 2).encoder.blocks[0].attn
    assert math_attn.rel_q.bias is None and math_attn.rel_k.bias is None
    lm = lm_model('DAT', 50, lm_protocol('smoke'))
    biases = [n for n, _ in lm.named_parameters() if n.endswith('.bias') and 'norm' not in n]
    assert biases == ['stack.symbols.w_q.bias']        # no bias but symbolic attention's query map, as the official q_proj
    assert not any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in lm.modules())
    vit = vision_model('ViDAT (asymmetric)', 8, 2, 1, 10, vision_protocol('smoke'))
    attn = vit.encoder.blocks[0].attn
    assert attn.rel_q.bias is None and attn.rel_k.bias is None
    assert isinstance(vit.embed.norm_in, torch.nn.LayerNorm) and isinstance(vit.head[0], torch.nn.LayerNorm) and vit.pool == 'mean'   # App. C.3: average pooling


def test_math_models_have_the_official_attention_biases_and_counts():
    "As the official blocks (seq2seq_models.py at b7da583): Transformer attention biased on its outputs only, DAT's not at all; the counts are the official code's."
    from relbook.abstractor import count_params
    official = {('Transformer', 2): 697_954, ('Transformer+', 3): 1_294_802, ('DAT', 2): 755_426, ('DAT', 4): 1_431_778,
                ('DAT (RA decoder)', 3): 1_118_946}       # built from the official code (chapter 14 says how)
    assert {k: count_params(dat_math_model(*k)) for k in official} == official
    for m, out in (('Transformer', True), ('DAT', False)):
        net = dat_math_model(m, 2)
        enc, dec = net.encoder.blocks[0], net.decoder.blocks[0]
        assert enc.attn.sa_q.bias is None and enc.attn.sa_k.bias is None and dec.cross.q.bias is None and dec.cross.kv.bias is None
        assert (enc.attn.sa_o.bias is not None) == out and (dec.cross.o.bias is not None) == out, m
        assert enc.mlp.w1.bias is not None and dec.mlp.w2.bias is not None                      # the feed-forward layers keep theirs


def test_math_dat_shares_one_symbol_library():
    "App. C.2: one position-relative symbol library for every layer of encoder and decoder (counted once)."
    net = dat_math_model('DAT (RA decoder)', 2)
    assert net.decoder.symbols is net.encoder.symbols
    lib = net.encoder.symbols.library
    assert sum(p is lib for p in net.parameters()) == 1


# --- the chapter's claims ---------------------------------------------------------------------
import math
import pandas as pd
from relbook.evidence import CLAIMS
from relbook.dat_experiments import SYMMETRY_MARGIN, RCA_MARGIN

DAT_CLAIMS = {'dat-math-vs-transformer', 'dat-math-vs-transformer-plus', 'dat-vision-digits', 'dat-vision-cifar',
              'dat-vision-symmetry', 'dat-lm-vs-transformer', 'dat-lm-ra-vs-rca', 'dat-lm-rca-vs-transformer',
              'dat-lm-symbolic-vs-positional', 'dat-lm-symbolic-vs-relative'}


def _vision_rows(acc, seeds=3, datasets=('digits',)):
    return pd.DataFrame([dict(model=m, dataset=ds, seed=s, test_acc=acc(m, s), best_step=300, curve=[[30.0, .9], [60.0, .8]])
                         for m in VISION_MODELS for ds in datasets for s in range(seeds)])


def test_claims_are_declared():
    assert DAT_CLAIMS == {k for k, c in CLAIMS.items() if c.chapter == '14_dat_experiments'}
    assert all(CLAIMS[k].paper == 'altabaa2024disentangling' and CLAIMS[k].paper_value for k in DAT_CLAIMS)


def test_vision_claims_equivalence_and_missing_cifar():
    same = _vision_rows(lambda m, s: 0.95 + 0.001 * s + (0.002 + 0.001 * (-1) ** s) * (m == 'ViDAT'))   # a spread over seeds
    ev = CLAIMS['dat-vision-symmetry'].evaluate(same)
    assert ev.comparison.direction == 0 and ev.comparison.threshold == SYMMETRY_MARGIN
    assert ev.comparison.verdict == 'supports the paper'                                     # within ±1 point
    far = _vision_rows(lambda m, s: 0.90 + 0.001 * s + (0.05 + 0.001 * (-1) ** s) * (m == 'ViDAT'))
    assert CLAIMS['dat-vision-symmetry'].evaluate(far).comparison.verdict == 'contradicts the paper'
    assert CLAIMS['dat-vision-digits'].evaluate(far).comparison.verdict == 'supports the paper'
    assert CLAIMS['dat-vision-cifar'].evaluate(far).comparison is None                       # digits only: not run


def test_lm_claims_read_lower_loss_as_better():
    jitter = lambda m, s: 0.001 * ((LM_MODELS.index(m) + 1) * s % 5)           # every pair of models differs across seeds: a spread
    rows = pd.DataFrame([dict(model=m, seed=s, val_loss=4.0 - 0.05 * (m == 'DAT') + 0.01 * s + jitter(m, s), best_step=300,
                              curve=[[100, 4.5], [300, 4.0], [600, 4.1]]) for m in LM_MODELS for s in range(3)])
    assert CLAIMS['dat-lm-vs-transformer'].evaluate(rows).comparison.verdict == 'supports the paper'
    assert CLAIMS['dat-lm-ra-vs-rca'].evaluate(rows).comparison.verdict == 'supports the paper'
    rca = CLAIMS['dat-lm-rca-vs-transformer'].evaluate(rows).comparison
    assert (rca.verdict, rca.threshold) == ('supports the paper', RCA_MARGIN)                # identical: within the margin
    assert rca.one_sided_margin and rca.direction == 1
    shift = lambda d: rows.assign(val_loss=rows.val_loss + d * (rows.model == 'DAT (RCA heads)'))
    assert CLAIMS['dat-lm-rca-vs-transformer'].evaluate(shift(0.1)).comparison.verdict == 'supports the paper'     # worse: no better
    assert CLAIMS['dat-lm-rca-vs-transformer'].evaluate(shift(-0.1)).comparison.verdict == 'contradicts the paper' # clearly better
    assert CLAIMS['dat-lm-vs-transformer'].evaluate(rows[rows.seed < 2]).comparison.verdict == 'insufficient data'
    assert CLAIMS['dat-lm-symbolic-vs-positional'].evaluate(rows).comparison.verdict == 'supports the paper'
    worse = rows.assign(val_loss=rows.val_loss + 0.2 * (rows.model == 'DAT'))
    assert CLAIMS['dat-lm-symbolic-vs-relative'].evaluate(worse).comparison.verdict == 'contradicts the paper'


def test_lm_trial_refuses_rows_of_another_protocol():
    "A row of protocol 1 (weight decay on every tensor) cannot be rerun by this code: it is history, not a trial to redo."
    from relbook.dat_experiments import lm_trial, LM_VERSION
    for bad in (LM_VERSION - 1, True, str(LM_VERSION)):
        with pytest.raises(ValueError, match=f"protocol must be {LM_VERSION} \\(LM_VERSION"):
            lm_trial('DAT', 0, protocol=bad)


# --- the vision recipes (App. C.3; the official CIFAR runs where it is silent) ----------------------
from dataclasses import replace
import numpy as np
from relbook.dat_experiments import (VISION_RECIPES, VISION_VERSION, VisionRecipe, AugmentedClassification, augment, cutmix, hflip,
                                     black_crop, crop_paste, crop_paste_draws, crop_paste_reference, random_crop_paste,
                                     vision_config, vision_trial)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_recipes_per_dataset():
    c, d = VISION_RECIPES['cifar10'], VISION_RECIPES['digits']
    assert VISION_RECIPES['cifar100'] == c
    assert (c.padding, c.pad_black, c.flip, c.crop_paste, c.mix, c.alpha, c.val) == (4, True, True, True, 'cutmix', 1.0, False)
    assert (d.padding, d.pad_black, d.flip, d.crop_paste, d.mix, d.alpha, d.val) == (1, False, False, False, 'mixup_cutmix', 0.8, True)
    with pytest.raises(ValueError, match='padding must be an int >= 0'): replace(c, padding=-1)
    with pytest.raises(ValueError, match='mix must be one of'): replace(c, mix='mixup')
    with pytest.raises(ValueError, match='alpha must be a positive'): replace(c, alpha=0.0)


@pytest.mark.parametrize('dataset', ['cifar10', 'digits'])
def test_flip_only_in_the_cifar_recipe(dataset):
    "With crops, crop-paste and mixing switched off, what is left of each recipe: a flip for CIFAR, nothing for digits."
    x = torch.randn(64, 3, 8, 8, generator=_gen(1))
    only = replace(VISION_RECIPES[dataset], padding=0, crop_paste=False, mix=None)
    out, t = augment(x, torch.eye(10)[torch.arange(64) % 10], only, _gen(), black=torch.zeros(3))
    same = torch.isclose(out, x, atol=1e-6).flatten(1).all(1)
    mirrored = torch.isclose(out, x.flip(-1), atol=1e-6).flatten(1).all(1)
    assert (same | mirrored).all() and torch.equal(t, torch.eye(10)[torch.arange(64) % 10])
    if dataset == 'cifar10': assert 16 < int(mirrored.sum()) < 48       # p = 0.5
    else: assert same.all()


def test_cifar_augmentation_shapes_and_ranges(tmp_path, monkeypatch):
    "Every augmented pixel is an image pixel, black, or a blend of them; targets are two labels' weights summing to 1."
    _write_cifar10(tmp_path)
    monkeypatch.setenv('RELBOOK_CIFAR', str(tmp_path))
    d = vision_data('cifar10', seed=0)
    x, y = d['train'][0][:128], d['train'][1][:128]
    onehot = torch.eye(10)[y]
    lo, hi = min(float(x.min()), float(d['black'].min())), max(float(x.max()), float(d['black'].max()))
    for seed in range(5):
        out, t = augment(x, onehot, VISION_RECIPES['cifar10'], _gen(seed), d['black'])
        assert out.shape == (128, 3, 32, 32) and t.shape == (128, 10) and out.dtype == torch.float32
        assert lo - 1e-5 <= float(out.min()) and float(out.max()) <= hi + 1e-5
        assert torch.allclose(t.sum(1), torch.ones(128)) and (t >= 0).all() and ((t > 0).sum(1) <= 2).all()
    assert (out == d['black'][None, :, None, None]).all(1).any(), "no black border in any crop"
    task = AugmentedClassification(10, VISION_RECIPES['cifar10'], seed=0, black=d['black'])
    net = vision_model('ViT', 32, 4, 3, 10, vision_protocol('smoke'))
    assert torch.isfinite(task.loss(net, (x[:8], y[:8])))
    with pytest.raises(ValueError, match='black must be given'): AugmentedClassification(10, VISION_RECIPES['cifar10'])


def test_cutmix_weights_match_a_hand_count():
    "λ is recomputed from the clipped box: an image's own label weighs the share of its own pixels it kept, its partner's the rest."
    x = torch.arange(16.)[:, None, None, None].expand(16, 3, 32, 32)    # image i is all i, label i
    clipped = mixed = 0
    for seed in range(40):
        out, t = cutmix(x, torch.eye(16), 1.0, _gen(seed))
        kept = (out == x).float().mean((1, 2, 3))
        assert torch.allclose(t.diagonal(), kept, atol=1e-6) and torch.allclose(t.sum(1), torch.ones(16))
        rows = (out != x).any(3).any(1).any(0); cols = (out != x).any(2).any(1).any(0)      # the box's rows and columns
        for i in torch.nonzero(kept < 1).flatten().tolist():
            j = int(out[i][out[i] != i][0])
            assert torch.equal(out[i][out[i] != i], torch.full_like(out[i][out[i] != i], j))   # one partner per image
            assert abs(float(t[i, j]) - (1 - float(kept[i]))) < 1e-6; mixed += 1
        if rows.any() and (rows[0] or rows[-1] or cols[0] or cols[-1]): clipped += 1
    assert mixed > 100 and clipped > 5


def test_cutmix_box_is_the_official_one():
    "The box da.py's CutMix cuts, recomputed from the same draws by its own arithmetic."
    for seed in range(20):
        g = _gen(seed)
        perm = torch.randperm(8, generator=g)
        lam = float(np.random.default_rng(int(torch.randint(2**62, (1,), generator=g))).beta(1.0, 1.0))
        r_x, r_y = (torch.rand(2, generator=g, dtype=torch.float64) * 32).tolist()
        r_w = r_h = 32 * np.sqrt(1 - lam)
        x1, x2 = int(np.clip(r_x - r_w // 2, a_min=0, a_max=32)), int(np.clip(r_x + r_w // 2, a_min=0, a_max=32))
        y1, y2 = int(np.clip(r_y - r_h // 2, a_min=0, a_max=32)), int(np.clip(r_y + r_h // 2, a_min=0, a_max=32))
        img = torch.randn(8, 3, 32, 32, generator=_gen(100 + seed))
        want = img.clone(); want[:, :, x1:x2, y1:y2] = img[perm][:, :, x1:x2, y1:y2]      # da.py's indexing, its names
        out, t = cutmix(img, torch.eye(8), 1.0, _gen(seed))
        assert torch.equal(out, want)
        lam_box = 1 - (x2 - x1) * (y2 - y1) / (32 * 32)
        assert torch.allclose(t, lam_box * torch.eye(8) + (1 - lam_box) * torch.eye(8)[perm])


def test_random_crop_paste_is_seeded_and_is_da_py():
    x = torch.randn(128, 3, 32, 32, generator=_gen(7))
    assert torch.equal(random_crop_paste(x, _gen(3)), random_crop_paste(x, _gen(3)))
    assert not torch.equal(random_crop_paste(x, _gen(3)), random_crop_paste(x, _gen(4)))
    fits = at_edge = 0
    for seed in range(10):
        d = crop_paste_draws(128, 32, 32, _gen(seed))
        assert torch.allclose(crop_paste(x, d), crop_paste_reference(x, d), atol=1e-6)
        fits += int(((d['py'] + d['fh'] <= 32) & (d['px'] + d['fw'] <= 32)).sum())
        at_edge += int(((d['px'] + d['fw'] == 32) & (d['fw'] > 0)).sum())       # da.py's exclusive bound never pastes here
        assert ((0 <= d['a']) & (d['a'] < 1)).all() and 0.3 < d['flip_patch'].mean() < 0.7 and 0.3 < d['flip_image'].mean() < 0.7
    assert fits == 1280 and at_edge > 0
    assert torch.equal(random_crop_paste(x[:0], _gen()), x[:0])


def test_cifar_step_reads_nothing_back():
    "On the meta device (shapes only) a read-back or a host copy fails: the CIFAR recipe's loss runs, so it makes none."
    g = _gen()
    x, y = torch.empty(6, 3, 32, 32, device='meta'), torch.empty(6, dtype=torch.long, device='meta')
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 10)).to('meta')
    task = AugmentedClassification(10, VISION_RECIPES['cifar10'], seed=0, black=torch.zeros(3))
    loss = task.loss(net, (x, y))
    assert loss.device.type == 'meta' and loss.shape == ()


def test_lr_decays_to_the_papers_floor():
    "App. C.3: warm-up to 1e-3, cosine down to 1e-5, for every dataset."
    from relbook.harness import make_scheduler
    cfg = vision_config(vision_protocol('smoke'), 1000)
    assert cfg.lr == 1e-3 and abs(cfg.lr * cfg.min_lr_ratio - 1e-5) < 1e-18 and cfg.schedule == 'cosine'
    assert (cfg.optimizer, cfg.betas, cfg.weight_decay) == ('adam', (0.9, 0.999), 5e-5)
    opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=cfg.lr)
    steps = 2 * 8
    sched = make_scheduler(opt, cfg, steps)
    lrs = [cfg.lr * sched.lr_lambdas[0](s) for s in range(steps + 1)]
    assert abs(max(lrs) - 1e-3) < 1e-15 and abs(lrs[-1] - 1e-5) < 1e-15


def test_vision_trial_refuses_rows_of_another_protocol():
    "Rows of version 1 (cosine to 0; CIFAR as the paper's text) cannot be rerun by this code: they are history."
    for bad in (VISION_VERSION - 1, True, str(VISION_VERSION), float(VISION_VERSION)):
        with pytest.raises(ValueError, match=f"protocol must be {VISION_VERSION} \\(VISION_VERSION"):
            vision_trial('ViT', 'digits', 0, protocol=bad)


def test_the_sweep_marks_its_protocol_and_old_rows_are_not_current():
    from relbook.campaign import intercept
    from relbook.harness import trial_key
    trials, _ = intercept('dat_vision', 'smoke')
    assert trials and all(t['protocol'] == VISION_VERSION for t in trials)
    old = {'model': trials[0]['model'], 'dataset': trials[0]['dataset'], 'seed': trials[0]['seed']}   # a stored row of version 1
    assert trial_key(old) not in {trial_key(t) for t in trials}


def test_cifar_trial_reports_the_end_of_training(tmp_path, monkeypatch):
    "No validation part and no selection: the test accuracy of the last evaluation is the one reported."
    _write_cifar10(tmp_path)
    monkeypatch.setenv('RELBOOK_CIFAR', str(tmp_path))
    out = vision_trial('ViT', 'cifar10', 0)
    assert out['scored'] == 'end of training'
    assert out['test_acc'] == out['curve'][-1][1] and out['curve'][-1][0] == vision_protocol('smoke').epochs


def test_trained_lm_says_which_network_it_draws(tmp_path, monkeypatch):
    """Chapter 14's Figure 5 is drawn from the sweep's DAT, seed 0, whose checkpoint is git-ignored: a model trained again
    (a fresh checkout, another CPU type) is another network than its row's, and says so; weights a trial left on disk say so
    on every later load too, through the record beside them; a record of other weights says nothing."""
    import json
    from relbook.harness import store_for
    from relbook.dat_experiments import trained_lm, _lm_path, LM_VERSION
    monkeypatch.setenv('RELBOOK_RESULTS', str(tmp_path))
    monkeypatch.setenv('RELBOOK_PROFILE', 'smoke')
    assert not _lm_path('DAT', 0).exists()
    net, _ = trained_lm('DAT', 0)                                       # trained here: no row stored
    loss = net.retrained['val_loss']
    assert net.retrained['row_val_loss'] is None and loss == loss and loss > 0
    side = _lm_path('DAT', 0).with_suffix('.json')
    assert json.loads(side.read_text())['val_loss'] == loss
    assert trained_lm('DAT', 0)[0].retrained is None                    # its weights, kept; no row to differ from
    store_for('dat_lm').add({'model': 'DAT', 'seed': 0, 'protocol': LM_VERSION}, {'val_loss': loss + 0.1})   # the row: another network
    rt = trained_lm('DAT', 0)[0].retrained
    assert rt == {'val_loss': loss, 'row_val_loss': loss + 0.1}
    rec = json.loads(side.read_text())
    side.write_text(json.dumps({'val_loss': loss + 0.1, 'sha1': rec['sha1']}))   # the sweep's own record, the row's network: nothing to say
    assert trained_lm('DAT', 0)[0].retrained is None
    side.write_text(json.dumps({'val_loss': loss, 'sha1': '0' * 40}))    # a record of other weights (a campaign's carried ones)
    assert trained_lm('DAT', 0)[0].retrained is None


def test_trained_lm_keeps_saying_it_was_trained_again(tmp_path, monkeypatch):
    """A model trained again can match its row to the last digits (5.5096107 against 5.5096109 on 2026-11-30's AMD EPYC,
    the row's from an Intel Xeon): the record beside its weights is marked, so a later render still says it is not the
    sweep's network. Only seed 0's weights are kept; another seed, or an unknown model, is refused by name."""
    import json
    from relbook.harness import store_for
    from relbook.dat_experiments import trained_lm, _lm_path, LM_VERSION
    monkeypatch.setenv('RELBOOK_RESULTS', str(tmp_path))
    monkeypatch.setenv('RELBOOK_PROFILE', 'smoke')
    for bad, arg in ((dict(seed=1), 'seed'), (dict(seed=True), 'seed'), (dict(model='GPT'), 'model')):
        with pytest.raises(ValueError, match=arg):
            trained_lm(**{'model': 'DAT', 'seed': 0, **bad})
    net, _ = trained_lm('DAT', 0)
    loss = net.retrained['val_loss']
    assert json.loads(_lm_path('DAT', 0).with_suffix('.json').read_text())['retrained'] is True
    store_for('dat_lm').add({'model': 'DAT', 'seed': 0, 'protocol': LM_VERSION}, {'val_loss': loss})   # a row it matches exactly
    assert trained_lm('DAT', 0)[0].retrained == {'val_loss': loss, 'row_val_loss': loss}


def test_transformer_plus_claim_is_judged_at_each_depth():
    """Table 2's "at 2, 3 and 4 layers" holds only if it holds at each depth: a mean over depths could be carried by one
    (the review of 2026-11-30); one depth clearly against the paper contradicts it, whatever the others do."""
    import pandas as pd
    from relbook.dat_experiments import model_vs_each
    def rows(gap4):
        return pd.DataFrame([dict(model=m, n_layers=L, module='x', seed=s, ar_seq_acc=0.0, best_step=10, curve=[[10, 0.5], [20, 0.4]],
                                  acc=0.5 + 0.01 * s + (0.1 + 0.01 * s * L if m == 'DAT' else 0) + (gap4 - 0.1 if m == 'DAT' and L == 4 else 0))
                             for s in range(4) for L in (2, 3, 4) for m in ('DAT', 'Transformer+')])
    judge = model_vs_each('acc', 'DAT', 'Transformer+', 'n_layers')
    assert judge(rows(0.1)).comparison.verdict == 'supports the paper'             # ahead at every depth
    ev = judge(rows(-0.3))                                                         # far behind at 4 layers, ahead at 2 and 3
    assert ev.comparison.verdict == 'contradicts the paper' and 'the deciding one: n_layers = 4' in ev.ours
    assert ev.note.count('n_layers = ') == 3
    assert judge(rows(0.1).iloc[:0]).comparison is None
