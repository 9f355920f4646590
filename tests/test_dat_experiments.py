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
