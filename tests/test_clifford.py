"""relbook.clifford: API, bad inputs, the Clifford algebra, and Lemma (i)–(v) of Clift et al. (2020) as
property-based tests (hypothesis) on random inputs."""
import math
from functools import lru_cache
from itertools import combinations, permutations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from relbook.clifford import (CliffordAlgebra, safe_sqrt, triple_product_sq_from_dots, triple_product,
                              unsigned_scalar_product, simplex_volume, gram_matrix, MAX_N)

SETTINGS = settings(max_examples=60, deadline=None)
# bounded coordinates; tiny ones are set to 0 so that products of eight squared norms cannot underflow
def bounded(lim): return st.floats(-lim, lim, allow_nan=False, allow_infinity=False).map(lambda x: 0.0 if abs(x) < 1e-6 else x)
coord = bounded(10)


@st.composite
def vector_sets(draw, k_min=2, k_max=4):
    "k vectors in ℝ^d (k = 2..4, d = 1..6) as a (k, d) float64 array."
    k, d = draw(st.integers(k_min, k_max)), draw(st.integers(1, 6))
    return draw(arrays(np.float64, (k, d), elements=coord))


def usp(V: np.ndarray) -> float:
    return unsigned_scalar_product(*torch.from_numpy(V)).item()


def prod_norms(V: np.ndarray) -> float:
    return float(np.prod(np.linalg.norm(V, axis=1)))


@lru_cache(maxsize=None)
def algebra(n: int) -> CliffordAlgebra:
    return CliffordAlgebra(n)


# ---------------- safe_sqrt

def test_safe_sqrt_values_and_gradients():
    x = torch.tensor([-1e-9, 0.0, 1e-8, 2.0], dtype=torch.float64, requires_grad=True)
    y = safe_sqrt(x)
    # exactly torch's own sqrt of max(x, 0); within 1 ulp of libm (CI's CPU gave another last bit than
    # math.sqrt for sqrt(1e-8): a vectorised sqrt need not round like the scalar one)
    assert torch.equal(y.detach(), torch.sqrt(x.detach().clamp(min=0)))
    assert torch.equal(y.detach()[:2], torch.zeros(2, dtype=torch.float64)) and not torch.signbit(y.detach()[:2]).any()
    torch.testing.assert_close(y.detach()[2:], torch.tensor([math.sqrt(1e-8), math.sqrt(2)], dtype=torch.float64),
                               rtol=2.3e-16, atol=0)
    (g,) = torch.autograd.grad(y.sum(), x)
    assert torch.isfinite(g).all()
    assert g[0] == 0 and g[1] == 0                                    # flat for x ≤ 0
    assert g[2].item() == pytest.approx(0.5 / math.sqrt(1e-6))          # capped on (0, eps)
    assert g[3].item() == pytest.approx(0.5 / math.sqrt(2.0))
    # the unsafe sqrt really is broken there
    (g_bad,) = torch.autograd.grad(torch.sqrt(x).sum(), x)
    assert torch.isnan(g_bad[0]) and torch.isinf(g_bad[1])


def test_safe_sqrt_gradcheck_and_eps():
    x = torch.linspace(1e-3, 5.0, 9, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: safe_sqrt(t), (x,))
    x = torch.tensor([1e-4], dtype=torch.float64, requires_grad=True)   # below eps=1e-2: capped at 1/(2·0.1)
    (g,) = torch.autograd.grad(safe_sqrt(x, eps=1e-2).sum(), x)
    assert g.item() == pytest.approx(5.0)


def test_safe_sqrt_bad_input():
    with pytest.raises(ValueError, match="eps"): safe_sqrt(torch.ones(2), eps=0.0)
    with pytest.raises(ValueError, match="eps"): safe_sqrt(torch.ones(2), eps=-1)
    with pytest.raises(ValueError, match="x must be a tensor"): safe_sqrt(np.ones(2))


# ---------------- the triple product, three routes

def test_triple_product_by_hand():
    a, b, c = torch.tensor([1., 0.]), torch.tensor([1., 1.]), torch.tensor([0., 1.])
    assert triple_product(a, b, c).item() == pytest.approx(math.sqrt(2))
    assert triple_product_sq_from_dots(a @ b, a @ c, b @ c, a @ a, b @ b, c @ c).item() == 2.0
    assert unsigned_scalar_product(a, b, c).item() == pytest.approx(math.sqrt(2))


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_three_routes_agree_broadcast(dtype, tol):
    g = torch.Generator().manual_seed(0)
    p, l1, l2 = torch.randn(3, 2, 5, 7, generator=g, dtype=torch.float64).to(dtype)   # (b, n, d) each
    P, L1, L2 = p[:, :, None, None], l1[:, None, :, None], l2[:, None, None]          # -> (b, i, j, k)
    dot = lambda x, y: (x * y).sum(-1)
    sq = triple_product_sq_from_dots(dot(P, L1), dot(P, L2), dot(L1, L2), dot(P, P), dot(L1, L1), dot(L2, L2))
    u, t = unsigned_scalar_product(P, L1, L2), triple_product(P, L1, L2)
    assert sq.shape == u.shape == t.shape == (2, 5, 5, 5) and u.dtype == dtype
    scale = (p.norm(dim=-1).max() * l1.norm(dim=-1).max() * l2.norm(dim=-1).max()).item()
    assert (u - t).abs().max().item() < tol * scale
    assert (safe_sqrt(sq) - u).abs().max().item() < tol * scale
    # and each (i, j, k) entry is the unbatched value
    assert u[1, 2, 3, 4].item() == pytest.approx(unsigned_scalar_product(p[1, 2], l1[1, 3], l2[1, 4]).item(), rel=10 * tol)


def test_k2_is_abs_dot_and_k1_is_zero():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(2, 50, 4, generator=g, dtype=torch.float64)
    assert torch.allclose(unsigned_scalar_product(a, b), (a * b).sum(-1).abs(), rtol=1e-13, atol=0)
    assert torch.equal(unsigned_scalar_product(a), torch.zeros(50, dtype=torch.float64))


def test_large_k_uses_determinant_path():
    g = torch.Generator().manual_seed(2)
    V = torch.randn(6, 8, generator=g, dtype=torch.float64)          # k = 6 > MAX_LEIBNIZ
    G = V @ V.T
    expect = math.sqrt(G.diagonal().prod().item() - torch.linalg.det(G).item())
    assert unsigned_scalar_product(*V).item() == pytest.approx(expect, rel=1e-10)
    assert unsigned_scalar_product(*V[:, :5]).item() == pytest.approx(prod_norms(V[:, :5].numpy()), rel=1e-9)   # 6 vectors in ℝ⁵: dependent


def test_simplex_volume():
    assert simplex_volume(torch.tensor([2., 0.]), torch.tensor([0., 3.])).item() == pytest.approx(3.0)
    e = torch.eye(3, dtype=torch.float64)
    assert simplex_volume(*e).item() == pytest.approx(1 / 6)
    assert simplex_volume(e[0], e[1], e[0] + e[1]).item() == 0.0


def test_bad_inputs():
    with pytest.raises(ValueError, match="at least one tensor"): unsigned_scalar_product()
    with pytest.raises(ValueError, match="at least one tensor"): simplex_volume()
    with pytest.raises(ValueError, match=r"vectors\[1\] must have last dimension d=3"):
        unsigned_scalar_product(torch.ones(3), torch.ones(4))
    with pytest.raises(ValueError, match="shape"): unsigned_scalar_product(torch.tensor(1.0))
    with pytest.raises(ValueError, match="must broadcast"): gram_matrix(torch.ones(2, 3), torch.ones(4, 3))
    with pytest.raises(ValueError, match="last dimension"): triple_product(torch.ones(3), torch.ones(3), torch.ones(2))
    with pytest.raises(ValueError, match="broadcast"):
        triple_product_sq_from_dots(torch.ones(2), torch.ones(3), 1.0, 1.0, 1.0, 1.0)


def test_mixed_dtypes_promote():
    a = torch.ones(3, dtype=torch.float32)
    assert unsigned_scalar_product(a, torch.ones(3, dtype=torch.float64)).dtype == torch.float64


# ---------------- the Clifford algebra

def test_clifford_basics():
    cl = CliffordAlgebra(3)
    e1, e2, e3 = np.eye(3)
    e12 = cl.product(e1, e2)
    assert np.array_equal(np.flatnonzero(e12), [0b011])
    assert np.array_equal(cl.product(e2, e1), -e12)
    assert np.array_equal(cl.gp(e12, e12), cl.scalar(-1))
    assert np.array_equal(cl.product(e1, e2, e3), cl.wedge(e1, e2, e3))
    assert cl.product(e3, e1)[0b101] == -1.0                      # e3 e1 = −e13
    assert np.array_equal(cl.reverse(cl.product(e1, e2, e3)), -cl.product(e1, e2, e3))
    assert np.array_equal(cl.wedge(e1, e1), np.zeros(8))


@pytest.mark.parametrize("n", [1, 4, MAX_N])
def test_clifford_relations(n):
    cl, rng = CliffordAlgebra(n), np.random.default_rng(n)
    v, w = rng.standard_normal((2, n))
    V, W = cl.vector(v), cl.vector(w)
    assert np.allclose(cl.gp(V, W) + cl.gp(W, V), cl.scalar(2 * v @ w), atol=1e-12)
    A, B, C = rng.standard_normal((3, 1 << n))
    assert np.allclose(cl.gp(cl.gp(A, B), C), cl.gp(A, cl.gp(B, C)), atol=1e-10)
    assert np.allclose(cl.reverse(cl.gp(A, B)), cl.gp(cl.reverse(B), cl.reverse(A)), atol=1e-10)
    assert cl.magnitude(A) ** 2 == pytest.approx(sum(cl.magnitude(cl.grade(A, i)) ** 2 for i in range(n + 1)), rel=1e-12)


def test_clifford_bad_inputs():
    for n in (0, MAX_N + 1, 2.0, True):
        with pytest.raises(ValueError, match="n must be"): CliffordAlgebra(n)
    cl = CliffordAlgebra(3)
    with pytest.raises(ValueError, match=r"v must have shape \(3,\)"): cl.vector([1.0, 2.0])
    with pytest.raises(ValueError, match=r"A must be a multivector of shape \(8,\)"): cl.gp(np.ones(4), np.ones(8))
    with pytest.raises(ValueError, match=r"k must be an int in \[0, 3\]"): cl.grade(cl.scalar(1), -1)
    with pytest.raises(ValueError, match=r"k must be an int in \[0, 3\]"): cl.grade(cl.scalar(1), True)   # not grade 1
    with pytest.raises(ValueError, match="at least one vector"): cl.product()


def test_sum_of_squares_det_and_top_degree():
    cl, rng = CliffordAlgebra(5), np.random.default_rng(0)
    for k in (2, 3, 5):
        L = rng.standard_normal((k, 5))
        top = cl.grade(cl.product(*L), k)
        assert np.allclose(top, cl.wedge(*L), atol=1e-12)
        minors2 = sum(np.linalg.det(L[:, list(J)]) ** 2 for J in combinations(range(5), k))
        assert cl.magnitude(top) ** 2 == pytest.approx(minors2, rel=1e-10)


# ---------------- Lemma (i)–(v), property-based

@SETTINGS
@given(vector_sets())
def test_lemma_i_bounds(V):
    r = usp(V)
    assert 0 <= r <= prod_norms(V) * (1 + 1e-12) + 1e-300


@SETTINGS
@given(vector_sets(), st.integers(0, 2**32 - 1))
def test_lemma_ii_pairwise_orthogonal_gives_zero(V, seed):
    k, d = V.shape
    Q = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))[0]   # (d, d) orthonormal columns
    scales = np.linalg.norm(V, axis=1)                                        # (k,) reuse drawn lengths
    W = np.zeros((k, d))
    m = min(k, d)
    W[:m] = Q[:, :m].T * scales[:m, None]                                     # k > d: the rest are zero vectors
    assert usp(W) <= 1e-12 * prod_norms(W) + 1e-300


@SETTINGS
@given(vector_sets(k_max=3), arrays(np.float64, (3,), elements=bounded(3)))
def test_lemma_iii_dependent_sets_reach_the_bound(V, coef):
    k = V.shape[0]
    W = np.vstack([V, coef[:k] @ V])                                          # (k + 1, d): last is a combination
    assert usp(W) == pytest.approx(prod_norms(W), rel=1e-9, abs=1e-300)


@SETTINGS
@given(st.integers(2, 4), st.integers(0, 4), st.integers(0, 2**32 - 1))
def test_lemma_iii_independent_sets_stay_below(k, extra, seed):
    d, rng = k + extra, np.random.default_rng(seed)
    Q = np.linalg.qr(rng.standard_normal((d, k)))[0]                          # (d, k) orthonormal columns
    T = np.triu(rng.uniform(-2, 2, (k, k)), 1) + np.diag(rng.uniform(0.5, 2, k) * rng.choice([-1, 1], k))
    V = (Q @ T).T                                                             # (k, d) rows, Gram = TᵀT
    gap = prod_norms(V) ** 2 - usp(V) ** 2                                    # = det G = Π T_ii²
    assert gap == pytest.approx(np.prod(np.diag(T)) ** 2, rel=1e-8)
    assert usp(V) < prod_norms(V)


@SETTINGS
@given(vector_sets(), st.data())
def test_lemma_iv_permutation_invariance(V, data):
    perm = data.draw(st.permutations(range(V.shape[0])))
    assert abs(usp(V[perm]) ** 2 - usp(V) ** 2) <= 1e-12 * prod_norms(V) ** 2 + 1e-300


@SETTINGS
@given(vector_sets(), st.data())
def test_lemma_v_homogeneity(V, data):
    lam = data.draw(arrays(np.float64, (V.shape[0],), elements=bounded(5)))
    s = float(np.prod(np.abs(lam)))
    assert abs(usp(lam[:, None] * V) ** 2 - s ** 2 * usp(V) ** 2) <= 1e-12 * (s * prod_norms(V)) ** 2 + 1e-300


@SETTINGS
@given(vector_sets())
def test_clifford_definition_equals_dot_product_formula(V):
    k, d = V.shape
    cl = algebra(d)
    P = cl.product(*V)
    clif_sq = sum(cl.magnitude(cl.grade(P, i)) ** 2 for i in range(min(k, d + 1)))
    assert abs(usp(V) ** 2 - clif_sq) <= 1e-11 * prod_norms(V) ** 2 + 1e-300
    if k == 3:
        a, b, c = torch.from_numpy(V)
        assert abs(triple_product(a, b, c).item() ** 2 - clif_sq) <= 1e-11 * prod_norms(V) ** 2 + 1e-300
