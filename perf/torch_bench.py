#!/usr/bin/env python3
"""torch.distributed on "strata" against "gloo": the same processes, the same
tensors, interleaved repetitions, medians and the ratio.

Each of NP processes (one rank each, on this host) joins a gloo group and a strata
group over the same rendezvous. Per size and collective, every repetition times
ITERS calls on gloo, then ITERS on strata (after a barrier on each; a repetition's
time is the slowest rank's), and the table shows the medians over REPS repetitions:
time per call, and bus bandwidth as nccl-tests computes it (all-reduce: size *
2(n-1)/n; all-gather, list form: total output size * (n-1)/n). Results are checked exactly.

Then DistributedDataParallel: one model (MLP, ~MB of float32 gradients), two DDP
replicas from the same initial weights, one on each backend; the median step time
of each (interleaved), and whether their parameters still agree bit for bit.

usage: /usr/bin/python3 perf/torch_bench.py [--np 2] [--sizes 1M,16M,64M] [--colls all_reduce,all_gather]
         [--reps 5] [--iters N] [--ddp-mb 48] [--ddp-steps 10] [--ddp-batch 8] [--threads 1] [--no-ddp]
Put the build's python folder on PYTHONPATH (PYTHONPATH=build/python), or run it
from the source tree with the default build (it looks there itself).
"""
import argparse
import datetime
import os
import socket
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "build", "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1].upper()] if s[-1].upper() in units else int(s)


def human(n):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}iB"
    return f"{n} B"


def bus_factor(coll, n):
    return 2 * (n - 1) / n if coll == "all_reduce" else (n - 1) / n


def timed(group, gloo, fn, iters):
    """Seconds for `iters` calls of fn on the slowest rank."""
    dist.barrier(group=group)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=gloo)
    return elapsed.item()


def make_call(coll, nbytes, rank, world, group):
    """The call, and a check of its result (exact: small integers in float32)."""
    n = nbytes // 4
    if coll == "all_reduce":
        x = torch.full((n,), float(rank + 1))  # the first call is checked; later ones sum the sums (exact too)

        def call():
            dist.all_reduce(x, group=group)

        def ok():
            return bool(torch.all(x == world * (world + 1) / 2))
        return call, ok
    per = n // world  # nbytes is the output, as in nccl-tests; the list form (gloo has no _allgather_base)
    inp = torch.full((per,), float(rank + 1))
    out = [torch.empty(per) for _ in range(world)]

    def call():
        dist.all_gather(out, inp, group=group)

    def ok():
        return all(bool(torch.all(o == r + 1)) for r, o in enumerate(out))
    return call, ok


def collectives(args, rank, world, groups, gloo, results):
    for coll in args.colls:
        for nbytes in args.sizes:
            iters = args.iters or max(2, min(50, (256 << 20) // (nbytes * 2)))
            times = {name: [] for name in groups}
            calls = {name: make_call(coll, nbytes, rank, world, g) for name, g in groups.items()}
            for name in groups:  # warm up, and check once
                calls[name][0]()
                if not calls[name][1]():
                    raise SystemExit(f"rank {rank}: {coll} {human(nbytes)} on {name}: wrong result")
            for _ in range(args.reps):
                for name, g in groups.items():
                    times[name].append(timed(g, gloo, calls[name][0], iters) / iters)
            if rank == 0:
                results.append((coll, nbytes, {k: statistics.median(v) for k, v in times.items()}))


def mlp(mb, seed):
    width = 1024
    layers = max(1, int(mb * (1 << 20) / 4 / (width * width + width)))
    torch.manual_seed(seed)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods), width


def ddp(args, rank, world, groups, gloo):
    from torch.nn.parallel import DistributedDataParallel as DDP
    models = {}
    for name, g in groups.items():
        net, width = mlp(args.ddp_mb, 1234)
        models[name] = (DDP(net, process_group=g), torch.optim.SGD(net.parameters(), lr=2 ** -10))
    grads_mb = sum(p.numel() for p in models["gloo"][0].parameters()) * 4 / (1 << 20)
    torch.manual_seed(99 + rank)
    batches = [torch.randn(args.ddp_batch, width) for _ in range(args.ddp_steps + 1)]
    steps = {name: [] for name in groups}
    for i, x in enumerate(batches):
        for name, (model, opt) in models.items():
            dist.barrier(group=gloo)
            t0 = time.perf_counter()
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
            elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=gloo)
            if i:  # the first step builds the buckets
                steps[name].append(elapsed.item())
    same = all(torch.equal(a, b) for a, b in zip(models["gloo"][0].parameters(), models["strata"][0].parameters()))
    close = all(torch.allclose(a, b, rtol=1e-5, atol=1e-7)
                for a, b in zip(models["gloo"][0].parameters(), models["strata"][0].parameters()))
    return grads_mb, {k: statistics.median(v) for k, v in steps.items()}, same, close


def rank_main(rank, args, port):
    import strata_torch  # noqa: F401  registers "strata"
    torch.set_num_threads(args.threads)  # torchrun's default for several processes per host: 1
    world = args.np
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=600))
    gloo = dist.new_group(backend="gloo")  # for the timing reductions, apart from the measured group
    groups = {"gloo": dist.group.WORLD, "strata": dist.new_group(backend="strata")}
    results = []
    collectives(args, rank, world, groups, gloo, results)
    ddp_result = None if args.no_ddp else ddp(args, rank, world, groups, gloo)
    if rank == 0:
        report(args, world, results, ddp_result)
    dist.destroy_process_group()


def report(args, world, results, ddp_result):
    print(f"# torch {torch.__version__}, {world} processes, {args.reps} interleaved repetitions, medians")
    print(f"{'collective':<12}{'size':>10}{'gloo us':>12}{'strata us':>12}{'gloo busbw':>12}{'strata busbw':>14}"
          f"{'ratio':>8}")
    for coll, nbytes, med in results:
        bw = {k: nbytes * bus_factor(coll, world) / v / 1e9 for k, v in med.items()}
        print(f"{coll:<12}{human(nbytes):>10}{med['gloo'] * 1e6:>12.0f}{med['strata'] * 1e6:>12.0f}"
              f"{bw['gloo']:>12.2f}{bw['strata']:>14.2f}{med['gloo'] / med['strata']:>7.2f}x")
    if ddp_result:
        mb, steps, same, close = ddp_result
        print(f"DDP step ({mb:.0f} MB of gradients, batch {args.ddp_batch}, median of {args.ddp_steps}): gloo {steps['gloo'] * 1e3:.1f} ms, "
              f"strata {steps['strata'] * 1e3:.1f} ms, ratio {steps['gloo'] / steps['strata']:.2f}x; "
              f"parameters after: {'identical' if same else 'within 1e-5' if close else 'DIFFERENT'}")
    sys.stdout.flush()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--sizes", default="1M,16M,64M")
    p.add_argument("--colls", default="all_reduce,all_gather")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--iters", type=int, default=0, help="calls per repetition (default: by size)")
    p.add_argument("--ddp-mb", type=float, default=48)
    p.add_argument("--ddp-steps", type=int, default=10)
    p.add_argument("--ddp-batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (torchrun sets 1)")
    p.add_argument("--no-ddp", action="store_true")
    args = p.parse_args()
    args.sizes = [parse_size(s) for s in args.sizes.split(",")]
    args.colls = args.colls.split(",")
    for c in args.colls:
        if c not in ("all_reduce", "all_gather"):
            p.error(f"unknown collective {c}")
    mp.spawn(rank_main, args=(args, free_port()), nprocs=args.np)


if __name__ == "__main__":
    main()
