"""Q-network building blocks against hand-computed values: C51 projection,
dueling, NoisyNet, Double DQN, conv shapes, trunk factory, QNetwork shapes."""
import itertools
import math

import pytest
import torch

from rllib_fast.core.qnets import (MinAtarCNN, NatureCNN, NoisyLinear, QNetwork, categorical_projection,
                                   conv_out_hw, dueling_aggregate, make_trunk)

Z5 = torch.linspace(-2.0, 2.0, 5)          # atoms -2 -1 0 1 2, dz = 1
P5 = torch.tensor([0.1, 0.2, 0.3, 0.2, 0.2])


def _proj(p, r, d, z=Z5):
    return categorical_projection(p.unsqueeze(0), torch.tensor([r]), torch.tensor([d]), z)[0]


# ----------------------------------------------------------------- C51 projection
@pytest.mark.parametrize("r,d,expected", [
    # Tz = 0.5 + 0.5 z = [-.5, 0, .5, 1, 1.5]: half-way atoms split 50/50, on-atom ones stay whole
    (0.5, 0.5, [0.0, 0.05, 0.05 + 0.2 + 0.15, 0.15 + 0.2 + 0.1, 0.1]),
    # Tz = z + 1 = [-1, 0, 1, 2, 3]: every Tz exactly on an atom (l == u); 3 clipped to 2
    (1.0, 1.0, [0.0, 0.1, 0.2, 0.3, 0.4]),
    # Tz = z + 3 = [1..5] clipped to v_max: all but the first atom land on the edge atom
    (3.0, 1.0, [0.0, 0.0, 0.0, 0.1, 0.9]),
    # Tz = z - 3 = [-5..-1] clipped to v_min
    (-3.0, 1.0, [0.8, 0.2, 0.0, 0.0, 0.0]),
    # terminal (discount 0): all mass at r = 0.25 -> split 0.75 / 0.25 between atoms 0 and 1
    (0.25, 0.0, [0.0, 0.0, 0.75, 0.25, 0.0]),
    (1.0, 0.0, [0.0, 0.0, 0.0, 1.0, 0.0]),     # terminal, r exactly on an atom
    (2.0, 0.0, [0.0, 0.0, 0.0, 0.0, 1.0]),     # terminal, r on the top edge atom
    (-2.0, 0.0, [1.0, 0.0, 0.0, 0.0, 0.0]),    # terminal, r on the bottom edge atom
    (-7.0, 0.0, [1.0, 0.0, 0.0, 0.0, 0.0]),    # terminal, r below v_min
])
def test_projection_hand_examples(r, d, expected):
    out = _proj(P5, r, d)
    torch.testing.assert_close(out, torch.tensor(expected), atol=1e-6, rtol=0)
    assert abs(out.sum().item() - 1.0) < 1e-6


def _reference_projection(p, r, d, z):
    """C51 Algorithm 1, atom by atom, with the l == u case handled explicitly."""
    K, vmin, vmax = len(z), z[0].item(), z[-1].item()
    dz = (vmax - vmin) / (K - 1)
    m = torch.zeros(K, dtype=torch.float64)
    for j in range(K):
        tz = min(max(r + d * z[j].item(), vmin), vmax)
        b = (tz - vmin) / dz
        lo, hi = math.floor(b), math.ceil(b)
        if lo == hi:
            m[lo] += p[j]
        else:
            m[lo] += p[j] * (hi - b)
            m[hi] += p[j] * (b - lo)
    return m


def test_projection_matches_reference_batched():
    g = torch.Generator().manual_seed(0)
    z = torch.linspace(-10, 10, 51, dtype=torch.float64)
    B = 64
    p = torch.rand(B, 51, generator=g, dtype=torch.float64).softmax(-1)
    r = torch.randn(B, generator=g, dtype=torch.float64) * 6
    d = torch.where(torch.rand(B, generator=g) < 0.25, 0.0, 0.99 ** 3).to(torch.float64)
    r[:4] = torch.tensor([0.4, -10.0, 10.0, 25.0])  # on-atom (0.4 = atom 26) and edges
    d[:4] = 0.0
    out = categorical_projection(p, r, d, z)
    ref = torch.stack([_reference_projection(p[i], r[i].item(), d[i].item(), z) for i in range(B)])
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)
    torch.testing.assert_close(out.sum(-1), torch.ones(B, dtype=torch.float64))
    assert (out >= 0).all()


# ----------------------------------------------------------------- dueling / double Q
def test_dueling_aggregate_mean_identity_and_shapes():
    v = torch.tensor([[1.0], [-2.0]])
    a = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 6.0]])
    q = dueling_aggregate(v, a)
    torch.testing.assert_close(q, torch.tensor([[0.0, 1.0, 2.0], [-4.0, -4.0, 2.0]]))
    torch.testing.assert_close(q.mean(1), v[:, 0])            # mean_a Q == V
    torch.testing.assert_close(dueling_aggregate(v[:, 0], a), q)  # [B] value also accepted
    # C51: per-atom aggregation on logits [B, A, atoms]
    vl, al = torch.randn(4, 1, 7), torch.randn(4, 3, 7)
    ql = dueling_aggregate(vl, al)
    assert ql.shape == (4, 3, 7)
    torch.testing.assert_close(ql.mean(1), vl[:, 0])
    torch.testing.assert_close(ql - ql[:, :1], al - al[:, :1])  # advantage differences kept


# ----------------------------------------------------------------- NoisyLinear
def test_noisy_linear_init_noise_eval_and_grads():
    torch.manual_seed(0)
    layer = NoisyLinear(16, 8, sigma0=0.5)
    bound = 1 / math.sqrt(16)
    assert layer.weight_mu.abs().max() <= bound and layer.bias_mu.abs().max() <= bound
    torch.testing.assert_close(layer.weight_sigma, torch.full((8, 16), 0.5 * bound))
    torch.testing.assert_close(layer.bias_sigma, torch.full((8,), 0.5 * bound))
    assert {n for n, _ in layer.named_buffers()} == {"eps_in", "eps_out"}

    x = torch.randn(5, 16)
    y1 = layer(x)
    torch.testing.assert_close(layer(x), y1)              # noise fixed between resets
    layer.reset_noise()
    assert not torch.allclose(layer(x), y1)                # resample changes the output
    # noise equals the explicit factorised weight (f(eps_out) f(eps_in)^T)
    w = layer.weight_mu + layer.weight_sigma * torch.outer(layer.eps_out, layer.eps_in)
    b = layer.bias_mu + layer.bias_sigma * layer.eps_out
    torch.testing.assert_close(layer(x), x @ w.T + b)

    mu_path = x @ layer.weight_mu.T + layer.bias_mu
    torch.testing.assert_close(layer(x, noise=False), mu_path)
    layer.eval()
    y_eval = layer(x)
    layer.reset_noise()
    torch.testing.assert_close(layer(x), y_eval)           # deterministic in eval
    torch.testing.assert_close(y_eval, mu_path)
    layer.train()

    layer(x).pow(2).sum().backward()
    for p in (layer.weight_mu, layer.weight_sigma, layer.bias_mu, layer.bias_sigma):
        assert p.grad is not None and p.grad.abs().sum() > 0


def test_noise_transform_is_sign_sqrt_abs():
    torch.manual_seed(1)
    layer = NoisyLinear(4000, 3)
    torch.manual_seed(2)
    layer.reset_noise()
    torch.manual_seed(2)
    raw = torch.randn(4000)
    torch.testing.assert_close(layer.eps_in, raw.sign() * raw.abs().sqrt())


# ----------------------------------------------------------------- trunks
def test_nature_cnn_shapes_104x80_and_84x84():
    # 104x80 (Stooke & Abbeel): conv1 gives exactly 25x19, padding 1 in conv 2/3 -> 12x9
    assert conv_out_hw((104, 80), 8, 4, 0) == (25, 19)
    cnn = NatureCNN(4, (104, 80))
    assert cnn.conv_hw == [(25, 19), (12, 9), (12, 9)] and cnn.out_dim == 64 * 12 * 9
    x = torch.randint(0, 256, (2, 4, 104, 80), dtype=torch.uint8)
    h = cnn.net[1](cnn.net[0](x.float()))
    assert h.shape == (2, 32, 25, 19)
    assert cnn(x).shape == (2, cnn.out_dim)
    cnn84 = NatureCNN(4, (84, 84))
    assert cnn84.conv_hw == [(20, 20), (10, 10), (10, 10)]
    assert cnn84(torch.zeros(3, 4, 84, 84, dtype=torch.uint8)).shape == (3, 6400)
    # uint8 is scaled by 1/255 inside
    torch.testing.assert_close(cnn(x), cnn(x.float() / 255))


def test_trunks_on_channels_last_images():
    t, d = make_trunk((84, 84, 4))                          # auto -> nature
    assert isinstance(t[1], NatureCNN)
    assert t(torch.zeros(2, 84, 84, 4, dtype=torch.uint8)).shape == (2, d)
    t, d = make_trunk((10, 10, 4), hidden_sizes=(32,))      # auto -> minatar, + dense
    assert isinstance(t[1], MinAtarCNN) and d == 32
    obs = torch.rand(3, 10, 10, 4) > 0.5                    # MinAtar bool frames
    assert t(obs).shape == (3, 32)
    assert MinAtarCNN(4).out_dim == 16 * 8 * 8
    assert t(obs.to(torch.uint8)).equal(t(obs))             # 0/1 uint8 not rescaled
    t, d = make_trunk((6,), hidden_sizes=(32, 16), activation="tanh")
    assert d == 16 and t(torch.randn(5, 6)).shape == (5, 16)


@pytest.mark.parametrize("shape,kind", [((84, 84, 4), "mlp"), ((10, 10, 4), "mlp"), ((4,), "nature_cnn"),
                                        ((4,), "minatar_cnn"), ((3, 4), "auto"), ((4,), "resnet"),
                                        ((10, 10, 4), "nature_cnn")])
def test_make_trunk_errors(shape, kind):
    with pytest.raises(ValueError):
        make_trunk(shape, kind)


# ----------------------------------------------------------------- QNetwork
@pytest.mark.parametrize("dueling,atoms,noisy,trunk", itertools.product(
    [False, True], [1, 11], [False, True], ["mlp", "minatar_cnn"]))
def test_qnetwork_shapes_all_combinations(dueling, atoms, noisy, trunk):
    torch.manual_seed(0)
    shape = (6,) if trunk == "mlp" else (10, 10, 4)
    net = QNetwork(shape, 3, trunk=trunk, hidden_sizes=(32, 16), dueling=dueling, num_atoms=atoms,
                   noisy=noisy, v_min=-5, v_max=5)
    obs = torch.randn(4, 6) if trunk == "mlp" else (torch.rand(4, 10, 10, 4) > 0.5).to(torch.uint8)
    q = net(obs)
    assert q.shape == (4, 3)
    q.sum().backward()  # before reset_noise: it rewrites the noise buffers in place
    assert all(p.grad is not None for p in net.parameters())
    assert any(isinstance(m, NoisyLinear) for m in net.modules()) == noisy
    if atoms > 1:
        logits = net.logits(obs, noise=False)
        assert logits.shape == (4, 3, atoms)
        torch.testing.assert_close(net.support, torch.linspace(-5, 5, atoms))
        torch.testing.assert_close(net(obs, noise=False), net.q_from_logits(logits))
        torch.testing.assert_close(net.log_probs(obs, noise=False).exp().sum(-1), torch.ones(4, 3))
        assert (q >= -5 - 1e-5).all() and (q <= 5 + 1e-5).all()
    else:
        with pytest.raises(ValueError):
            net.logits(obs)
    if dueling:  # mean-advantage identity: mean_a of the aggregate equals the value stream
        feat = net.trunk(obs)
        v = net.value(feat, False).view(4, 1, atoms)
        agg = net._head(obs, False)
        torch.testing.assert_close(agg.mean(1), v[:, 0])
    if noisy:
        before = net(obs)
        net.reset_noise()
        assert not torch.allclose(net(obs), before)
        net.eval()
        torch.testing.assert_close(net(obs), net(obs, noise=False))


def test_qnetwork_default_hidden_sizes():
    assert QNetwork((4,), 2).advantage.hidden.out_features == 256
    assert QNetwork((10, 10, 4), 2).advantage.hidden.out_features == 128
    net = QNetwork((84, 84, 4), 6, dueling=True)
    assert net.advantage.hidden.out_features == 512 and net.value.hidden.out_features == 512
    assert net(torch.zeros(1, 84, 84, 4, dtype=torch.uint8)).shape == (1, 6)
