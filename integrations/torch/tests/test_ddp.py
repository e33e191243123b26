"""DistributedDataParallel on "strata" against the same training on Gloo: two
replicas of each model from the same weights, the same batches, several steps
(small buckets, so several per step; one step accumulates under no_sync). The
parameters must agree with Gloo's bit for bit where the arithmetic is exact (any
model on 2 ranks, where a sum of two is the same either way round; a model whose
gradients are small dyadic numbers on any number of ranks), and within float
rounding otherwise; and every rank's replica must be the same.

usage: test_ddp.py WORLD
"""
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from launch import run_ranks


def mlp():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
                               torch.nn.Linear(64, 4))


def dyadic_linear():
    torch.manual_seed(7)
    m = torch.nn.Linear(16, 8)
    with torch.no_grad():
        m.weight.copy_(torch.randint(-8, 8, m.weight.shape) / 8)
        m.bias.copy_(torch.randint(-8, 8, m.bias.shape) / 8)
    return m


class Branchy(torch.nn.Module):
    """An MLP with a head that the loss never uses (find_unused_parameters)."""
    def __init__(self):
        super().__init__()
        torch.manual_seed(7)
        self.body = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 4))
        self.unused = torch.nn.Linear(48, 3)

    def forward(self, x):
        return self.body(x)


def batches(kind, rank, steps):
    g = torch.Generator().manual_seed(100 + rank)
    if kind in ("mlp", "hooks"):
        return [(torch.randn(8, 32, generator=g), torch.randn(8, 4, generator=g)) for _ in range(steps)]
    return [(torch.randint(-4, 5, (4, 16), generator=g).float(), torch.randint(-2, 3, (4, 8), generator=g).float())
            for _ in range(steps)]


def loss_of(kind, out, target):
    # mlp: mean squared error; dyadic: a loss linear in the output (gradients are integers)
    return (out * target).sum() if kind == "dyadic" else ((out - target) ** 2).mean()


def fresh(kind):
    return {"mlp": mlp, "dyadic": dyadic_linear, "hooks": Branchy}[kind]()


def train(kind, group, rank, steps):
    net = fresh(kind)
    # ~1000 floats per bucket: several buckets. "hooks": unused parameters, and the
    # gradients all-reduced in float16 by a communication hook (futures and then()).
    model = DDP(net, process_group=group, bucket_cap_mb=0.004, find_unused_parameters=kind == "hooks")
    if kind == "hooks":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        model.register_comm_hook(group, default_hooks.fp16_compress_hook)
    opt = torch.optim.SGD(model.parameters(), lr=2 ** -4)
    data = batches(kind, rank, steps + 1)
    for i in range(steps):
        opt.zero_grad()
        x, y = data[i]
        if i == 2:  # accumulate a micro-batch locally, then one synchronised
            with model.no_sync():
                loss_of(kind, model(data[-1][0]), data[-1][1]).backward()
        loss_of(kind, model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def same_on_every_rank(params, gloo):  # gloo: the Gloo group (None: the default)
    flat = torch.cat([p.reshape(-1) for p in params]).double()
    lo, hi = flat.clone(), flat.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN, group=gloo)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX, group=gloo)
    return torch.equal(lo, hi)


def rank_main(rank, world):
    import strata_torch  # noqa: F401
    # On 2 ranks "strata" is the default group (DDP without process_group=), on 4 a second one.
    default = "strata" if world == 2 else "gloo"
    dist.init_process_group(default, init_method="env://")
    other = dist.new_group(backend="gloo" if default == "strata" else "strata")
    strata, gloo = (None, other) if default == "strata" else (other, None)
    failures = []
    for kind in ("mlp", "dyadic", "hooks"):
        ours = train(kind, strata, rank, 6)
        theirs = train(kind, gloo, rank, 6)
        exact = kind == "dyadic" or world == 2 and kind == "mlp"
        for k, (a, b) in enumerate(zip(ours, theirs)):
            if exact and not torch.equal(a, b):
                failures.append(f"{kind} parameter {k}: differs from Gloo's by {(a - b).abs().max().item():g}")
            # float16 sums of 4 round at each step, in each library's order: a float16 tolerance
            elif not torch.allclose(a, b, rtol=1e-5, atol=1e-4 if kind == "hooks" else 1e-6):
                failures.append(f"{kind} parameter {k}: off Gloo's by {(a - b).abs().max().item():g}")
        if not same_on_every_rank(ours, gloo):
            failures.append(f"{kind}: the ranks' replicas differ")
        moved = any(not torch.equal(a, b) for a, b in zip(ours, [p.detach() for p in fresh(kind).parameters()]))
        if not moved:
            failures.append(f"{kind}: training did not change the parameters")
        if rank == 0:
            identical = all(torch.equal(a, b) for a, b in zip(ours, theirs))
            diff = max((a - b).abs().max().item() for a, b in zip(ours, theirs))
            print(f"{kind}: {len(ours)} parameters after 6 steps "
                  f"{'identical to' if identical else f'within {diff:.1e} of'} Gloo's", flush=True)
    if failures:
        raise AssertionError(f"rank {rank}: " + "; ".join(failures))
    dist.destroy_process_group(other)
    dist.destroy_process_group()


if __name__ == "__main__":
    run_ranks(rank_main, int(sys.argv[1]), deadline=600)
