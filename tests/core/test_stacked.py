"""Stacked (population) layers and the vectorised Adam against K independent torch modules."""
import math

import pytest
import torch
from torch import nn

from rllib_fast.core.stacked import (FusedSteps, StackedConv2d, StackedLinear, StackedMLP, VectorAdam,
                                     copy_members, dynamo_compile_count, flat_members, load_flat_members)

K = 4


def _mlps(k, i, hidden, o):
    return [nn.Sequential(nn.Linear(i, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                          nn.Linear(hidden, o)) for _ in range(k)]


def test_stacked_mlp_forward_backward_equals_independent_modules():
    torch.manual_seed(0)
    mods = _mlps(K, 5, 16, 3)
    stacked = StackedMLP(K, 5, (16, 16), 3)
    stacked.load_members(mods)
    x = torch.randn(K, 7, 5)
    out = stacked(x)
    ref = torch.stack([m(x[i]) for i, m in enumerate(mods)])
    assert (out - ref).abs().max() < 1e-5
    (out.square().sum()).backward()
    sum(m(x[i]).square().sum() for i, m in enumerate(mods)).backward()
    for layer, idx in zip(stacked.layers, (0, 2, 4)):
        gw = torch.stack([m[idx].weight.grad.t() for m in mods])
        gb = torch.stack([m[idx].bias.grad for m in mods]).unsqueeze(1)
        assert (layer.weight.grad - gw).abs().max() < 1e-5
        assert (layer.bias.grad - gb).abs().max() < 1e-5


def test_stacked_conv_forward_backward_equals_independent_convs():
    torch.manual_seed(1)
    convs = [nn.Conv2d(3, 8, 3, stride=2, padding=1) for _ in range(K)]
    stacked = StackedConv2d(K, 3, 8, 3, stride=2, padding=1)
    for m, c in enumerate(convs):
        stacked.load_member(m, c)
    x = torch.randn(K, 5, 3, 9, 9)
    out = stacked(x)
    ref = torch.stack([c(x[i]) for i, c in enumerate(convs)])
    assert out.shape == ref.shape and (out - ref).abs().max() < 1e-5
    out.sum().backward()
    sum(c(x[i]).sum() for i, c in enumerate(convs)).backward()
    gw = torch.stack([c.weight.grad for c in convs])
    assert (stacked.weight.grad - gw).abs().max() < 1e-5


def test_member_init_is_exactly_nn_linear_in_the_same_rng_order():
    torch.manual_seed(3)
    stacked = StackedLinear(K, 20, 6)
    torch.manual_seed(3)
    lins = [nn.Linear(20, 6) for _ in range(K)]
    for m, lin in enumerate(lins):
        assert torch.equal(stacked.weight[m], lin.weight.t())
        assert torch.equal(stacked.bias[m, 0], lin.bias)
    torch.manual_seed(4)
    conv = StackedConv2d(2, 3, 4, 3)
    torch.manual_seed(4)
    ref = [nn.Conv2d(3, 4, 3) for _ in range(2)]
    assert all(torch.equal(conv.weight[m], ref[m].weight) and torch.equal(conv.bias[m], ref[m].bias)
               for m in range(2))


def test_member_init_statistics_match_nn_linear():
    """Per member: Kaiming-uniform(a=sqrt 5) on fan_in = in_features (bound 1/sqrt(in)), bias U(+-1/sqrt(in)).
    Initialising the 3-D tensor at once would use the wrong fans."""
    torch.manual_seed(0)
    fan_in, out_f, k = 64, 256, 16
    s = StackedLinear(k, fan_in, out_f)
    bound = 1 / math.sqrt(fan_in)
    ref_std = bound / math.sqrt(3)               # std of U(-b, b)
    for m in range(k):
        w, b = s.weight[m], s.bias[m]
        assert w.abs().max() <= bound + 1e-7 and b.abs().max() <= bound + 1e-7
        assert w.std().item() == pytest.approx(ref_std, rel=0.05)
        assert w.abs().max() > 0.95 * bound
    # members are independent draws
    c = torch.corrcoef(s.weight.reshape(k, -1))
    assert (c - torch.eye(k)).abs().max() < 0.05


@pytest.mark.parametrize("decoupled", [False, True])
def test_vector_adam_per_member_hparams_equals_separate_adams(decoupled):
    torch.manual_seed(0)
    mods = _mlps(K, 4, 8, 2)
    stacked = StackedMLP(K, 4, (8, 8), 2)
    stacked.load_members(mods)
    lrs, b1s, b2s = [1e-3, 3e-3, 1e-2, 3e-4], [0.9, 0.8, 0.95, 0.5], [0.999, 0.99, 0.9, 0.999]
    wds, epss = [0.0, 0.01, 0.1, 0.0], [1e-8, 1e-6, 1e-8, 1e-4]
    opt_cls = torch.optim.AdamW if decoupled else torch.optim.Adam
    opts = [opt_cls(m.parameters(), lr=lrs[i], betas=(b1s[i], b2s[i]), eps=epss[i], weight_decay=wds[i])
            for i, m in enumerate(mods)]
    params = list(stacked.parameters())
    vopt = VectorAdam(params, K, lr=torch.tensor(lrs), betas=(torch.tensor(b1s), torch.tensor(b2s)),
                      eps=torch.tensor(epss), weight_decay=torch.tensor(wds), decoupled=decoupled)
    for step in range(5):
        x = torch.randn(K, 16, 4)
        grads = torch.autograd.grad(stacked(x).square().mean(dim=(1, 2)).sum(), params)
        vopt.step(grads)
        for i, (m, o) in enumerate(zip(mods, opts)):
            o.zero_grad()
            m(x[i]).square().mean().backward()
            o.step()
    ref = StackedMLP(K, 4, (8, 8), 2)
    ref.load_members(mods)
    for a, b in zip(stacked.parameters(), ref.parameters()):
        assert (a - b).abs().max() < 1e-5


def test_vector_adam_mask_and_member_reset():
    p = torch.nn.Parameter(torch.zeros(3, 2))
    opt = VectorAdam([p], 3, lr=0.1)
    opt.step([torch.ones(3, 2)], mask=torch.tensor([True, False, True]))
    assert torch.equal(p[1], torch.zeros(2)) and bool((p[0] < 0).all())
    assert opt.step_count.view(-1).tolist() == [1, 0, 1]
    opt.reset_members(torch.tensor([0]))
    assert opt.step_count.view(-1).tolist() == [0, 0, 1] and float(opt.exp_avg[0].abs().sum()) == 0.0


def test_copy_members_and_flat_genomes():
    torch.manual_seed(0)
    net = StackedMLP(5, 3, (4,), 2)
    before = [t.clone() for t in net.parameters()]
    copy_members(net, torch.tensor([0, 1]), torch.tensor([3, 4]))
    for b, a in zip(before, net.parameters()):
        assert torch.equal(a[3], b[0]) and torch.equal(a[4], b[1])
        assert torch.equal(a[:3], b[:3])
    flat = flat_members(net)
    load_flat_members(net, flat.flip(0))
    assert torch.equal(flat_members(net), flat.flip(0))


def test_fused_steps_no_recompile_when_member_hyperparameters_change():
    """Hyperparameters are tensors: PBT rewriting them must not re-trace the compiled step."""
    torch.manual_seed(0)
    net = StackedMLP(3, 4, (8,), 1)
    params = list(net.parameters())
    opt = VectorAdam(params, 3, lr=1e-3)
    gamma = torch.full((3,), 0.99)
    x = torch.randn(3, 16, 4)

    def step():
        loss = (net(x)[..., 0] * gamma.unsqueeze(1)).square().mean(1).sum()
        opt.step(torch.autograd.grad(loss, params))
        return loss

    torch._dynamo.reset()
    fused = FusedSteps(step, compile=True, backend="eager")
    fused(3)
    n0 = dynamo_compile_count()
    assert n0 >= 1
    opt.lr[1] = 5e-2          # PBT explore: in place
    gamma.fill_(0.9)
    opt.beta1[0] = 0.5
    before = flat_members(net).clone()
    fused(3)
    assert dynamo_compile_count() == n0
    assert not torch.equal(before, flat_members(net))
    assert fused.compile_time_s >= 0.0


@pytest.mark.parametrize("layer_norm", [False, True])
def test_member_slice_forward_equals_that_slice_of_the_full_forward(layer_norm):
    """``members=slice(...)`` runs only those members (Q1 of a twin critic stacked as
    [Q1 members; Q2 members]) and gives bit-identical outputs and gradients to that
    slice of the full forward."""
    torch.manual_seed(0)
    net = StackedMLP(2 * K, 5, (16, 16), 1, layer_norm=layer_norm)
    with torch.no_grad():   # non-trivial LayerNorm affine parameters
        for p in net.parameters():
            p.add_(0.1 * torch.randn_like(p))
    x = torch.randn(K, 7, 5)
    full = net(torch.cat([x, x], 0))[:K]
    sliced = net(x, members=slice(0, K))
    assert sliced.shape == (K, 7, 1) and torch.equal(sliced, full)
    g_slice = torch.autograd.grad(sliced.sum(), list(net.parameters()))
    g_full = torch.autograd.grad(net(torch.cat([x, x], 0))[:K].sum(), list(net.parameters()))
    for a, b in zip(g_slice, g_full):
        assert torch.equal(a, b)
    shared = net(x[:1], members=slice(0, K))          # one input for every member of the slice
    assert torch.equal(shared, net(x[:1].expand(K, 7, 5), members=slice(0, K)))


def test_twin_critic_gradients_are_clipped_jointly_per_member():
    """Q1 of member m (slot m) and Q2 (slot P + m) are one learner's critics: a
    single agent clips their joint norm, so the stack must too (same direction)."""
    from rllib_fast.core.stacked import clip_grads_per_member

    torch.manual_seed(0)
    P = 3
    grads = [torch.randn(2 * P, 4, 5) * 10, torch.randn(2 * P, 5) * 10]
    clipped = clip_grads_per_member(grads, torch.tensor(1.0), pairs=P)
    sq = sum(g.reshape(2 * P, -1).square().sum(1) for g in clipped)
    joint = (sq[:P] + sq[P:]).sqrt()
    torch.testing.assert_close(joint, torch.ones(P))
    for m in range(P):   # one coefficient for both nets of a member
        ratio = clipped[0][m] / grads[0][m]
        torch.testing.assert_close(clipped[0][P + m] / grads[0][P + m], ratio)
