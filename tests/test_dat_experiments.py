"Tests of the DAT experiments' data paths and models (relbook.dat_experiments)."
import pytest
import torch
from relbook.datasets import write_cifar_batch
from relbook.dat_experiments import vision_data, vision_model, vision_protocol, VISION_MODELS, dat_math_model, lm_model, lm_protocol, LM_MODELS


def _write_cifar10(root, n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    folder = root / 'cifar-10-batches-py'
    for name in [f'data_batch_{i}' for i in range(1, 6)] + ['test_batch']:
        write_cifar_batch(folder / name, torch.randint(0, 256, (n, 3, 32, 32), generator=g, dtype=torch.uint8),
                          torch.arange(n) % 10)


def test_vision_data_cifar_from_written_files(tmp_path, monkeypatch):
    _write_cifar10(tmp_path)
    monkeypatch.setenv('RELBOOK_CIFAR', str(tmp_path))
    d = vision_data('cifar10', seed=0)
    n_train, n_val, n_test = (len(d[k][1]) for k in ('train', 'val', 'test'))
    assert (n_train, n_val, n_test) == (200 - 20, 20, 40) and d['patch'] == 4 and d['n_classes'] == 10
    assert abs(float(d['train'][0].mean())) < 0.05                       # normalised with the training statistics
    net = vision_model('ViDAT', 32, d['patch'], 3, d['n_classes'], vision_protocol('smoke'))
    assert net(d['val'][0][:2]).shape == (2, 10)


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
    same = _vision_rows(lambda m, s: 0.95 + 0.001 * s + 0.002 * (m == 'ViDAT'))
    ev = CLAIMS['dat-vision-symmetry'].evaluate(same)
    assert ev.comparison.direction == 0 and ev.comparison.threshold == SYMMETRY_MARGIN
    assert ev.comparison.verdict == 'supports the paper'                                     # within ±1 point
    far = _vision_rows(lambda m, s: 0.90 + 0.001 * s + 0.05 * (m == 'ViDAT'))
    assert CLAIMS['dat-vision-symmetry'].evaluate(far).comparison.verdict == 'contradicts the paper'
    assert CLAIMS['dat-vision-digits'].evaluate(far).comparison.verdict == 'supports the paper'
    assert CLAIMS['dat-vision-cifar'].evaluate(far).comparison is None                       # digits only: not run


def test_lm_claims_read_lower_loss_as_better():
    rows = pd.DataFrame([dict(model=m, seed=s, val_loss=4.0 - 0.05 * (m == 'DAT') + 0.01 * s, best_step=300,
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
