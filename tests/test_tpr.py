import pytest, torch
from relbook.tpr import (tpr_bind, tpr_unbind, dual_basis, hadamard_bind,
                         TPMultiHeadAttention, tp_attention_reference)

def test_unbind_orthonormal_and_dual():
    g = torch.Generator().manual_seed(1)
    f = torch.randn(3, 4, 6, generator=g, dtype=torch.float64)
    Q, _ = torch.linalg.qr(torch.randn(3, 5, 5, generator=g, dtype=torch.float64))
    r = Q[:, :4]
    assert torch.allclose(tpr_unbind(tpr_bind(f, r), r), f, atol=1e-12)
    r = torch.randn(3, 4, 5, generator=g, dtype=torch.float64)
    assert torch.allclose(tpr_unbind(tpr_bind(f, r), dual_basis(r)), f, atol=1e-10)

@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tp", [False, True])
def test_fast_vs_reference(causal, tp):
    torch.manual_seed(0)
    att = TPMultiHeadAttention(8, 2, tp=tp).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    mem = x if causal else torch.randn(2, 6, 8, dtype=torch.float64)
    pad = torch.zeros(2, mem.shape[1], dtype=torch.bool); pad[1, -2:] = True
    assert torch.allclose(att(x, mem, pad, causal), tp_attention_reference(att, x, mem, pad, causal), atol=1e-6)

def test_bad_input():
    with pytest.raises(ValueError, match="divisible"): TPMultiHeadAttention(7, 2)
    att = TPMultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match="x"): att(torch.randn(2, 5, 6), torch.randn(2, 5, 8))
    with pytest.raises(ValueError, match="same shape"): hadamard_bind(torch.randn(2, 3), torch.randn(2, 4))
    with pytest.raises(ValueError, match="r"): tpr_bind(torch.randn(2, 3, 4), torch.randn(2, 2, 4))


def _small(tp=True):
    from relbook.tpr import TPConfig, TPTransformer
    torch.manual_seed(0)
    return TPTransformer(TPConfig(vocab=13, d_model=16, n_heads=2, d_ff=32, n_enc_layers=2, n_dec_layers=1, max_len=40, tp=tp)).eval()


@pytest.mark.parametrize("tp", [False, True])
def test_model_ignores_source_padding_and_generate_matches_forward(tp):
    net = _small(tp)
    src, tgt = torch.randint(1, 13, (4, 9)), torch.randint(1, 13, (4, 6))
    padded = torch.cat([src, torch.zeros(4, 5, dtype=torch.long)], 1)
    assert (net(src, tgt) - net(padded, tgt)).abs().max() < 1e-5
    gen = net.generate(src, 5, tgt[:, :1])
    assert torch.equal(gen, net(src, torch.cat([tgt[:, :1], gen[:, :-1]], 1)).argmax(-1))


def test_roles_matter_and_intermediates():
    net, plain = _small(True), _small(False)
    assert sum(p.numel() for p in net.parameters()) > sum(p.numel() for p in plain.parameters())
    src = torch.randint(1, 13, (2, 7)); src[1, 5:] = 0
    mem, inter = net.encode(src, return_intermediates=True)
    L = inter.layers[0]
    assert len(inter.layers) == 2 and L.roles.shape == (2, 2, 7, 8) and L.inputs.shape == (2, 7, 16)
    assert L.attn[1, :, :, 5:].abs().max() == 0, "no attention to padding"
    assert plain.encode(src, return_intermediates=True)[1].layers[0].roles is None


def test_model_bad_input():
    from relbook.tpr import TPConfig
    net = _small()
    with pytest.raises(ValueError, match="src must be int64"): net(torch.rand(2, 3), torch.ones(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"token ids in \[0, 13\)"): net(torch.full((2, 3), 13), torch.ones(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="exceeds max_len"): net(torch.ones(1, 41, dtype=torch.long), torch.ones(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="pad_id must be"): TPConfig(vocab=5, pad_id=5)
