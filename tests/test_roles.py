"""Tests of the role analysis of relbook.mathbench (chapter 7): parse-based labels, the cluster table, Holm, controls, the summary and the reversal test."""
import numpy as np
import pytest
import torch
from sklearn.metrics import normalized_mutual_info_score, homogeneity_score

from relbook.mathbench import (expression_roles, fraction_roles, number_roles, extract_expression, holm, role_cluster_table,
                   compare_to_control, summarise, context_free_features, char_position_strata, restrict, unpad,
                   reversal_table, _nmi, _homogeneity, _purity, _contingency, _permuted_labels)

def code(labels) -> str:
    "n / d / . per character."
    return ''.join({'num': 'n', 'den': 'd', None: '.'}[l] for l in labels)

# ---------------------------------------------------------------------------------------------------------------
# 1. labels

@pytest.mark.parametrize('q, want', [
    ('Evaluate 9/(270/24).',                      '.........n..ddd.nn..'),      # 24: denominator of a denominator
    ('What is (-2)/(-6)*(-12)/(-16)?',            '..........n....d....nn....dd..'),
    ('Calculate ((-4)/(-6))/((-16)/(-84)).',      '.............n....d......dd....nn...'),
    ('What is the value of 20/(-8)*(-6)/15?',     '.....................nn...d....n..dd.'),
    ('(2 - (-1 + 3)) + 4/(-12)*-3',               '.n.....n...n.....n...dd...n'),
    ('Calculate 1/((-65)/10*-2).',                '..........n....dd..nn..d..'),  # unary minus keeps the side
    ('1/(2/(3/(4/5)))',                           'n..d..n..d.n...'),            # side flips with every denominator
    ('-(3)/-(4)',                                 '..n....d.'),
    ('What is 2 - 3?',                            '........n...n.'),             # no division: all on the top side
    ('Evaluate 4 + -2 + 14*(-9)*18.',             '.........n....n...nn...n..nn.'),
])
def test_expression_roles_hand_checked(q, want):
    assert code(expression_roles(q)) == want

def test_surface_vs_effective_on_fraction_of_fractions():
    q = 'Calculate (-2)/(-6)*9/(270/24).'
    assert code(fraction_roles(q)) == '............n....d..n......dd..'       # the old rule: 270 is both sides, 24 'den'
    assert code(expression_roles(q)) == '............n....d..n..ddd.nn..'     # the parse: 270 'den', 24 'num'

def test_finer_detail_and_number_roles():
    q = 'Evaluate 9/(270/24).'
    assert [l for l in expression_roles(q, 'depth') if l] == ['num/depth0'] + ['den/depth1'] * 3 + ['num/depth2'] * 2
    assert [l for l in expression_roles(q, 'place') if l] == ['num/place0', 'den/place2', 'den/place1', 'den/place0',
                                                             'num/place1', 'num/place0']
    r = number_roles(q)
    assert r[16] == {'side': 'num', 'depth': 2, 'place': 1, 'number': 2}

def test_extraction():
    assert extract_expression('What is (-2)/(-6)*(-12)/(-16)?') == (8, '(-2)/(-6)*(-12)/(-16)')
    assert extract_expression('Evaluate 9/(270/24).') == (9, '9/(270/24)')
    assert extract_expression('What is it?') is None and expression_roles('What is it?') == [None] * 11
    assert extract_expression('2**3') == (0, '2')                  # '**' is not an operator of the module: not parsed as one
    assert extract_expression('Is (3 + 4)) 12?') == (3, '(3 + 4)')  # an unbalanced run: the longest part that parses
    assert code(expression_roles('Let 3 be x. What is 4/2?')) == '....................n.d.'   # 3 is not in the expression

def test_real_questions_every_number_labelled():
    from relbook.mathdata import generate_problems
    qs = [q for q, _ in generate_problems('arithmetic__mixed', 'train-easy', 200, 0)]
    assert len(qs) == 200
    n_disagree = 0
    for q in qs:
        eff, sur = expression_roles(q), fraction_roles(q)
        assert len(eff) == len(sur) == len(q)
        assert all((l is not None) == c.isdigit() for c, l in zip(q, eff)), q      # every digit labelled, nothing else
        if q.count('/') == 1:   # one '/': the naive rule, where it speaks, must agree with the parse
            assert all(s is None or s == e for s, e in zip(sur, eff)), q
        n_disagree += any(s is not None and s != e for s, e in zip(sur, eff))
    assert n_disagree > 0                                  # nested fractions exist, and there the two rules differ

def test_bad_questions():
    for bad in ('', None, 3):
        with pytest.raises(ValueError, match='question'): expression_roles(bad)
        with pytest.raises(ValueError, match='question'): fraction_roles(bad)
    with pytest.raises(ValueError, match='detail'): expression_roles('1/2', detail='sides')

# ---------------------------------------------------------------------------------------------------------------
# 2. synthetic questions and roles

def rand_expr(rng, depth: int) -> str:
    "A random arithmetic__mixed-like expression."
    if depth == 0 or rng.random() < 0.3:
        n = str(int(rng.integers(1, 1000)))
        return f'(-{n})' if rng.random() < 0.3 else n
    op = rng.choice(list('+-*/'), p=[0.15, 0.15, 0.2, 0.5])
    a, b = rand_expr(rng, depth - 1), rand_expr(rng, depth - 1)
    wrap = lambda s: s if s.lstrip('(-').rstrip(')').isdigit() else f'({s})'
    return f'{wrap(a)}{op}{wrap(b)}' if op in '*/' else f'{a} {op} {b}'

def make_questions(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    pre = ['What is ', 'Evaluate ', 'Calculate ', '']
    return [pre[i % 4] + rand_expr(rng, 3) + ['?', '.', '.', ''][i % 4] for i in range(n)]

KS, N_PERM, N_BOOT = (5, 10, 20), 999, 300

@pytest.fixture(scope='module')
def data():
    qs = make_questions(90)
    labels = [expression_roles(q) for q in qs]
    control = role_cluster_table(context_free_features(qs), labels, ks=KS, n_perm=N_PERM, n_boot=N_BOOT, name='context-free')
    return qs, labels, control

def label_roles(qs, labels, shift=3.0, h=3, d=8, seed=0):
    "Head 0 encodes num/den by an offset plus noise; the other heads are noise."
    rng, out = np.random.default_rng(seed), []
    for q, lab in zip(qs, labels):
        r = rng.normal(size=(h, len(q), d))
        r[0, :, 0] += shift * np.array([l == 'den' for l in lab]); r[0, :, 1] += shift * np.array([l == 'num' for l in lab])
        out.append(r)
    return out

def charpos_roles(qs, h=3, d=8, seed=0):
    "Roles that are a (nonlinear) function of character and position only."
    rng = np.random.default_rng(seed)
    E = {c: rng.normal(size=(h, d)) for c in sorted(set(''.join(qs)))}
    P = rng.normal(size=(max(map(len, qs)), h, d))
    return [np.tanh(np.stack([E[c] + P[i] for i, c in enumerate(q)], 1)) for q in qs]

def test_a_label_roles_significant_and_beat_control(data):
    qs, labels, control = data
    t = role_cluster_table(label_roles(qs, labels), labels, ks=KS, n_perm=N_PERM, n_boot=N_BOOT)
    assert len(t) == 3 * len(KS) and set(t['k']) == set(KS)
    h0 = t[t['head'] == 0]
    assert h0['significant'].all() and (h0['purity'] > 0.9).all() and (h0['nmi'] > 3 * h0['nmi_null']).all()
    cmp = compare_to_control(t, control)
    assert cmp.loc[cmp['head'] == 0, 'beats'].all() and not cmp.loc[cmp['head'] > 0, 'beats'].any()
    s = summarise(t, control)
    assert 'So the clusters of head 0 at k=5, head 0 at k=10, head 0 at k=20 carry more den/num information than context-free.' in s
    assert f"{int(t['significant'].sum())} of 9 (head, k) clusterings carry significant den/num information" in s
    two = summarise(t, {'context-free': control, 'the roles themselves': t})     # must beat every control given
    assert 'Against the roles themselves: 0 of 9' in two and "So no head's clusters are shown to carry more" in two

def test_b_noise_roles_nothing_significant(data):
    qs, labels, control = data
    rng = np.random.default_rng(1)
    t = role_cluster_table([rng.normal(size=(3, len(q), 8)) for q in qs], labels, ks=KS, n_perm=N_PERM, n_boot=N_BOOT)
    assert not t['significant'].any() and (t['p_holm'] >= t['p_perm']).all()
    assert "So no head's clusters are shown to carry more" in summarise(t, control)

def test_c_char_position_roles_do_not_beat_control(data):
    qs, labels, control = data
    feats = charpos_roles(qs)
    t = role_cluster_table(feats, labels, ks=KS, n_perm=N_PERM, n_boot=N_BOOT)
    assert not compare_to_control(t, control)['beats'].any()
    assert "So no head's clusters are shown to carry more" in summarise(t, {'context-free': control})
    # the exact test: permuting labels within (character, position) cells cannot move a function of both
    ts = role_cluster_table(feats, labels, ks=KS, n_perm=N_PERM, n_boot=N_BOOT, strata=char_position_strata(qs))
    assert (ts['p_perm'] == 1.0).all() and not ts['significant'].any() and (ts['null'] == 'within strata').all()
    # ...while label-carrying roles stay significant under that null
    tl = role_cluster_table(label_roles(qs, labels), labels, ks=KS, n_perm=N_PERM, n_boot=N_BOOT, strata=char_position_strata(qs))
    assert tl.loc[tl['head'] == 0, 'significant'].all()

def test_roles_equal_to_control_features_are_no_better(data):
    qs, labels, control = data
    t = role_cluster_table(context_free_features(qs), labels, ks=KS, n_perm=N_PERM, n_boot=N_BOOT, name='copy')
    cmp = compare_to_control(t, control)
    assert not cmp['beats'].any() and (cmp.groupby('k')['diff'].max().abs() < 1e-12).all()

def test_restrict_to_correct_questions(data):
    qs, labels, _ = data
    feats = label_roles(qs, labels)
    correct = np.arange(len(qs)) % 3 != 0
    f2, l2, q2 = restrict(correct, feats, labels, qs)
    assert len(f2) == len(l2) == len(q2) == correct.sum() and q2[0] == qs[1] and f2[0] is feats[1]
    t = role_cluster_table(f2, l2, ks=(5,), n_perm=999, n_boot=50)
    assert t['n_questions'].iloc[0] == correct.sum()
    with pytest.raises(ValueError, match='mask'): restrict([1, 0, 1], qs[:3])
    with pytest.raises(ValueError, match='mask'): restrict(np.zeros(3, bool), qs[:3])
    with pytest.raises(ValueError, match=r'per_question\[1\]'): restrict(np.ones(3, bool), qs[:3], qs[:2])

# ---------------------------------------------------------------------------------------------------------------
# 3. statistics

def test_d_holm_known_vector():
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    np.testing.assert_allclose(holm([0.5]), [0.5])
    np.testing.assert_allclose(holm([0.01, 0.01, 0.5]), [0.03, 0.03, 0.5])      # ties
    np.testing.assert_allclose(holm([0.3, 0.9, 0.02]), [0.6, 0.9, 0.06])
    rng = np.random.default_rng(0)
    for _ in range(20):                  # against the textbook step-down: reject p_(i) while p_(i) <= alpha / (m - i)
        p, alpha = rng.random(8) ** 3, 0.05
        order, rejected = np.argsort(p), np.zeros(8, bool)
        for i, j in enumerate(order):
            if p[j] > alpha / (8 - i): break
            rejected[j] = True
        assert ((holm(p) <= alpha) == rejected).all()
    for bad in ([], [0.1, np.nan], [1.2], [[0.1, 0.2]]):
        with pytest.raises(ValueError, match='p_values'): holm(bad)

def test_scores_match_sklearn():
    rng = np.random.default_rng(0)
    for _ in range(10):
        c, y = rng.integers(0, 7, 300), rng.integers(0, 3, 300)
        y = np.where(rng.random(300) < 0.5, c % 3, y)                     # some dependence
        ct = _contingency(c, y, 7, 3)
        assert abs(_nmi(ct)[0] - normalized_mutual_info_score(y, c)) < 1e-10
        assert abs(_homogeneity(ct)[0] - homogeneity_score(y, c)) < 1e-10
        assert abs(_purity(ct)[0] - sum(np.bincount(y[c == k]).max() for k in np.unique(c)) / 300) < 1e-12
    assert _nmi(_contingency(np.zeros(5, int), np.zeros(5, int), 1, 1))[0] == 1.0       # sklearn's convention

def test_permutations_stay_within_strata():
    rng = np.random.default_rng(0)
    y, s = rng.integers(0, 2, 200), rng.integers(0, 15, 200)
    yp = _permuted_labels(y, s, 50, rng)
    for g in range(15):
        assert (np.sort(yp[:, s == g], 1) == np.sort(y[s == g])).all()
    assert (yp != y).any()

def test_auto_n_perm_reaches_significance_and_ks_clipped(data):
    qs, labels, _ = data
    feats = [np.eye(4)[np.arange(len(q)) % 4] for q in qs]      # only 4 distinct vectors: k in (5, 10) are dropped
    with pytest.warns(UserWarning, match='dropped'):
        t = role_cluster_table(feats, labels, ks=(2, 3, 5, 10), n_boot=20)
    assert list(t['k']) == [2, 3] and 2 / (t['n_perm'].iloc[0] + 1) <= 0.05 / 10

# ---------------------------------------------------------------------------------------------------------------
# 4. bad inputs

def test_e_bad_inputs_name_the_argument(data):
    qs, labels, control = data
    feats = label_roles(qs[:10], labels[:10])
    lab = labels[:10]
    cases = [
        (lambda: role_cluster_table(np.zeros((10, 3, 5, 8)), lab), 'features'),
        (lambda: role_cluster_table([], lab), 'features'),
        (lambda: role_cluster_table([np.zeros(5)] + feats[1:], lab), r'features\[0\]'),
        (lambda: role_cluster_table(feats[:1] + [feats[1][:2]] + feats[2:], lab), r'features\[1\]'),
        (lambda: role_cluster_table(feats, lab[:9]), 'labels'),
        (lambda: role_cluster_table(feats, [l[:-1] for l in lab]), r'labels\[0\]'),
        (lambda: role_cluster_table(feats, [['num' if x else None for x in l] for l in lab]), 'labels'),   # one class
        (lambda: role_cluster_table(feats, lab, ks=()), 'ks'),
        (lambda: role_cluster_table(feats, lab, ks=(1, 5)), 'ks'),
        (lambda: role_cluster_table(feats, lab, ks=5), 'ks'),
        (lambda: role_cluster_table(feats, lab, n_perm=50), 'n_perm'),
        (lambda: role_cluster_table(feats, lab, n_perm=0), 'n_perm'),
        (lambda: role_cluster_table(feats, lab, n_boot=1), 'n_boot'),
        (lambda: role_cluster_table(feats, lab, alpha=1.5), 'alpha'),
        (lambda: role_cluster_table(feats, lab, strata=[[0] for _ in lab]), r'strata\[0\]'),
        (lambda: compare_to_control(control, control.drop(columns='nmi_boot')), 'control'),
        (lambda: compare_to_control(role_cluster_table(feats, lab, ks=(5,), n_perm=99, n_boot=20), control), 'control'),
        (lambda: summarise(control, []), 'controls'),
        (lambda: summarise(control.iloc[:0], control), 'table'),
        (lambda: context_free_features([]), 'questions'),
        (lambda: context_free_features(qs, d_pos=3), 'd_pos'),
        (lambda: context_free_features(qs, pos_weights=()), 'pos_weights'),
        (lambda: context_free_features(qs, vocab='0123456789'), 'vocab'),
        (lambda: unpad(np.zeros((2, 3, 5, 4)), [5]), 'lengths'),
        (lambda: unpad(np.zeros((2, 3, 5, 4)), [5, 6]), 'lengths'),
        (lambda: unpad(np.zeros((2, 5)), [5, 5]), 'batch'),
        (lambda: reversal_table(feats, qs[:9]), 'questions'),
        (lambda: reversal_table(feats, qs[:10], ks=(10 ** 6,)), 'ks'),
    ]
    for i, (call, name) in enumerate(cases):
        with pytest.raises(ValueError, match=name): call()

def test_f_nan_is_an_error(data):
    qs, labels, _ = data
    feats = label_roles(qs[:10], labels[:10])
    for bad in (np.nan, np.inf):
        f = [x.copy() for x in feats]; f[3][1, 0, 0] = bad
        with pytest.raises(ValueError, match=r'features\[3\] contains NaN'): role_cluster_table(f, labels[:10])
        with pytest.raises(ValueError, match=r'features\[3\] contains NaN'): reversal_table(f, qs[:10])
    f = [torch.tensor(x) for x in feats]; f[0][0, 0, 0] = float('nan')
    with pytest.raises(ValueError, match=r'features\[0\] contains NaN'): role_cluster_table(f, labels[:10])
    lab = [list(l) for l in labels[:10]]; lab[2][0] = float('nan')
    with pytest.raises(ValueError, match=r'labels\[2\] contains NaN'): role_cluster_table(feats, lab)
    with pytest.raises(ValueError, match='p_values'): holm([0.01, float('nan')])

# ---------------------------------------------------------------------------------------------------------------
# 5. plumbing and the §5.1 reversal

def test_unpad_tensors_and_context_free_shapes():
    qs = ['1/2', 'What is 3/(4/5)?']
    batch = torch.randn(2, 4, max(map(len, qs)), 6)
    per_q = unpad(batch, [len(q) for q in qs])
    assert [p.shape for p in per_q] == [(4, 3, 6), (4, 16, 6)] and np.allclose(per_q[1], batch[1].numpy())
    cf = context_free_features(qs, d_pos=8, pos_weights=(1.0, 2.0))
    n_chars = len(set(''.join(qs)))
    assert cf[1].shape == (2, 16, n_chars + 8) and np.allclose(cf[1][0, :, :n_chars].sum(1), 1)
    assert np.allclose(np.linalg.norm(cf[1][1, :, n_chars:], axis=1), 2.0)

def test_reversal_table_tells_effective_from_naive():
    qs = make_questions(120, seed=3)
    rng, nr = np.random.default_rng(0), [number_roles(q) for q in qs]
    def roles_from(is_num):
        out = []
        for q, R in zip(qs, nr):
            x = rng.normal(size=(1, len(q), 6))
            for i, r in enumerate(R): x[0, i, 2 if r is None else 0 if is_num(r) else 1] += 4
            out.append(x)
        return out
    eff = reversal_table(roles_from(lambda r: r['side'] == 'num'), qs, ks=(5,))        # denominators of denominators as numerators
    naive = reversal_table(roles_from(lambda r: r['depth'] == 0), qs, ks=(5,))        # anything inside a denominator as 'den'
    assert eff['n_d2'].iloc[0] >= 20
    assert eff['num_rate_d2'].iloc[0] > 0.9 and eff['num_rate_d1'].iloc[0] < 0.1 and eff['p_holm'].iloc[0] < 1e-6
    assert naive['num_rate_d2'].iloc[0] < 0.1 and naive['p_holm'].iloc[0] > 0.05
