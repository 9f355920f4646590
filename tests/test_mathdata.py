"Tests of the mathematics_dataset compatibility layer (relbook.mathdata)."
import random
import numpy as np
from relbook.mathdata import load_generator


def test_load_generator_idempotent_and_generates():
    gen = load_generator()
    assert load_generator() is gen
    gen.init_modules(train_split=True)
    random.seed(0); np.random.seed(0)
    for name in ['polynomials__expand', 'polynomials__add', 'algebra__linear_1d']:
        p = gen.sample_from_module(gen.filtered_modules['train-easy'][name])[0]
        assert str(p.question) and str(p.answer)


def test_vocab_roundtrip_and_bad_char():
    import pytest
    from relbook.mathdata import encode, decode, PAD, BOS, EOS, VOCAB_SIZE
    ids = encode('Solve 0 = 55*x - 93 for x.', 40, True)
    assert ids[0] == BOS and EOS in ids and ids[-1] == PAD and max(ids) < VOCAB_SIZE
    assert decode(ids) == 'Solve 0 = 55*x - 93 for x.'
    with pytest.raises(ValueError, match='é'):
        encode('é', 4, False)


def test_generation_is_deterministic_cached_and_leaves_rng_alone(tmp_path, monkeypatch):
    from relbook.mathdata import generate_problems, data_dir
    monkeypatch.setenv('RELBOOK_DATA', str(tmp_path))
    assert data_dir() == tmp_path
    random.seed(3); np.random.seed(3); r0, n0 = random.random(), np.random.rand()
    random.seed(3); np.random.seed(3)
    a = generate_problems('arithmetic__mixed', 'train-easy', 6, seed=7)
    assert (random.random(), np.random.rand()) == (r0, n0)
    assert len(list((tmp_path / 'math').glob('*.json.gz'))) == 1                              # compressed, in math/
    assert generate_problems('arithmetic__mixed', 'train-easy', 6, seed=7) == a                 # cache hit
    assert generate_problems('arithmetic__mixed', 'train-easy', 6, seed=7, cache=False) == a    # fresh
    assert generate_problems('arithmetic__mixed', 'train-easy', 6, seed=8, cache=False) != a
    assert generate_problems('arithmetic__mixed', 'interpolate', 6, seed=7) != a


def test_unknown_module_and_split_fail_clearly():
    import pytest
    from relbook.mathdata import generate_problems
    with pytest.raises(ValueError, match="valid modules"): generate_problems('arithmetic__mixd', 'train-easy', 2, 0)
    with pytest.raises(ValueError, match="split must be one of"): generate_problems('arithmetic__mixed', 'test', 2, 0)
    with pytest.raises(ValueError, match="seed must be"): generate_problems('arithmetic__mixed', 'train-easy', 2, -1)


def test_math_data_tensors(tmp_path, monkeypatch):
    from relbook.mathdata import math_data, decode, BOS, EOS, PAD
    monkeypatch.setenv('RELBOOK_DATA', str(tmp_path))
    d = math_data('algebra__linear_1d', 32, 8, 8, seed=0)
    src, tgt = d['train']
    assert src.shape[0] == 32 and (tgt[:, 0] == BOS).all() and ((tgt == EOS).sum(1) == 1).all()
    train_q = {decode(s) for s in src}
    assert not train_q & {decode(s) for s in d['test'][0]}, "test questions must be unseen in training"


def test_a_cost_probe_draws_a_sample_of_each_set(monkeypatch):
    "relbook estimate sets RELBOOK_PROBE_PROBLEMS: every generated set is capped (steps and shapes are measured, not data)."
    from relbook.mathdata import _data_plan
    full = _data_plan('algebra__linear_1d', 30_000, 3_000, 2_000, 0, 'train', 'interpolate')
    assert sum(j[2] for j in full['train']) == 30_000
    monkeypatch.setenv('RELBOOK_PROBE_PROBLEMS', '100')
    capped = _data_plan('algebra__linear_1d', 30_000, 3_000, 2_000, 0, 'train', 'interpolate')
    assert sum(j[2] for j in capped['train']) == 100 and sum(j[2] for j in capped['val']) == 100 and capped['test'][0][2] == 100


def test_generate_problems_refuses_a_bool_seed():
    "True is not seed 1: a bool seed is refused before any generation."
    import pytest
    from relbook.mathdata import generate_problems
    for bad in (True, -1, 1.0):
        with pytest.raises(ValueError, match="seed must be an int >= 0"):
            generate_problems('arithmetic__mixed', 'train-easy', 2, seed=bad)
