"""Synchronous data-parallel learning: 2 gloo learners == 1 learner on the
concatenated batch, and identical parameters after every update."""
import os

import torch
import torch.multiprocessing as mp

from rllib_fast.algorithms.onpolicy.reductions import standardize
from rllib_fast.core.distributed import DistributedContext, free_port
from rllib_fast.core.normalize import RunningMeanStd


def _batches():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 32, 5, generator=g)
    y = torch.randn(2, 32, 1, generator=g)
    return x, y


def _model():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def _steps(model, opt, xs, ys, ctx=None, stats=None):
    rms = RunningMeanStd((5,))
    for _ in range(3):
        for x, y in zip(xs, ys):
            reduce = ctx.sum_ if ctx is not None else None
            rms.update(x, reduce=reduce)
            a = standardize(y.squeeze(-1), None, reduce)  # global advantage statistics
            loss = ((model(rms.normalize(x)).squeeze(-1) - a) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            if ctx is not None:
                ctx.average_gradients(list(model.parameters()))
            opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]), rms


def _worker(rank, port, out_dir):
    ctx = DistributedContext(rank, 2, f"tcp://127.0.0.1:{port}", torch.device("cpu"))
    x, y = _batches()
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    params, rms = _steps(model, opt, [x[rank]], [y[rank]], ctx)
    torch.save({"params": params, "mean": rms.mean, "var": rms.var}, os.path.join(out_dir, f"r{rank}.pt"))
    ctx.close()


def test_two_gloo_learners_equal_one_learner_on_concatenated_batch(tmp_path):
    torch.set_num_threads(1)
    mp.spawn(_worker, args=(free_port(), str(tmp_path)), nprocs=2, join=True)
    r0, r1 = torch.load(tmp_path / "r0.pt"), torch.load(tmp_path / "r1.pt")
    assert torch.equal(r0["params"], r1["params"])  # bit-identical across learners
    assert torch.equal(r0["mean"], r1["mean"]) and torch.equal(r0["var"], r1["var"])
    x, y = _batches()
    model = _model()
    single, rms = _steps(model, torch.optim.Adam(model.parameters(), lr=1e-2), [x.reshape(64, 5)], [y.reshape(64, 1)])
    torch.testing.assert_close(r0["params"], single, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(r0["mean"], rms.mean, rtol=1e-9, atol=1e-9)
