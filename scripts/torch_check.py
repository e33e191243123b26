"""torch.distributed on backend "nccl" through Strata's libnccl.so.2 (preloaded by
scripts/gpu-check.sh): world size 2, both ranks on cuda:0, every call checked exactly."""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, world, port, failures):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda:0"))
    dev = torch.device("cuda:0")
    errors = []

    def expect(name, got, want):
        if not torch.equal(got.cpu(), want.cpu()):
            errors.append(f"rank {rank}: {name}: got {got[:4].tolist()}, expected {want[:4].tolist()}")

    n = 1 << 16
    x = torch.arange(n, dtype=torch.float32, device=dev) + rank
    dist.all_reduce(x)
    expect("all_reduce", x, 2 * torch.arange(n, dtype=torch.float32) + 1)
    parts = [torch.empty(n, device=dev) for _ in range(world)]
    dist.all_gather(parts, torch.full((n,), float(rank), device=dev))
    for r in range(world):
        expect(f"all_gather[{r}]", parts[r], torch.full((n,), float(r)))
    out = torch.empty(n, device=dev)
    dist.reduce_scatter(out, [torch.full((n,), float(rank + r), device=dev) for r in range(world)])
    expect("reduce_scatter", out, torch.full((n,), float(sum(q + rank for q in range(world)))))
    b = torch.full((n,), float(rank), device=dev)
    dist.broadcast(b, src=1)
    expect("broadcast", b, torch.full((n,), 1.0))
    if rank == 0:
        dist.send(torch.full((n,), 42.0, device=dev), dst=1)
    else:
        got = torch.empty(n, device=dev)
        dist.recv(got, src=0)
        expect("send/recv", got, torch.full((n,), 42.0))
    ddp_steps(rank, world, dev, expect)
    graph_all_reduce(rank, world, dev, expect, errors)
    torch.cuda.synchronize()
    dist.destroy_process_group()
    failures.extend(errors)


def ddp_steps(rank, world, dev, expect):
    """Three DistributedDataParallel steps on a linear layer: rank r's batch is all r + 1,
    so every gradient is exact (weight: batch * mean(r + 1) = batch * 1.5; bias: batch)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4).to(dev)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.125)
    batch = 8
    for step in range(3):
        opt.zero_grad()
        ddp(torch.full((batch, 16), float(rank + 1), device=dev)).sum().backward()
        expect(f"ddp step {step} weight grad", model.weight.grad, torch.full((4, 16), batch * 1.5))
        expect(f"ddp step {step} bias grad", model.bias.grad, torch.full((4,), float(batch)))
        opt.step()
    mine = torch.cat([p.detach().flatten() for p in model.parameters()])
    theirs = mine.clone()
    dist.broadcast(theirs, src=0)
    expect("ddp parameters equal on every rank", mine, theirs)


def graph_all_reduce(rank, world, dev, expect, errors):
    """An all-reduce captured once in a CUDA graph and replayed three times. Ranks sharing
    a GPU go through Strata's proxy, which refuses capture (README): that must be a clean
    error naming CUDA graphs, never a hang or wrong data."""
    n = 1 << 12
    x = torch.zeros(n, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        dist.all_reduce(x)  # warm-up outside the capture, as PyTorch recommends
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            dist.all_reduce(x)
    except RuntimeError as e:
        msg = str(e)
        print(f"rank {rank}: graph capture refused: {msg.splitlines()[0] if msg else ''}", flush=True)
        if not any(w in msg.lower() for w in ("graph", "captur", "invalid usage")):
            errors.append(f"rank {rank}: graph capture failed without naming the cause: {msg}")
        return
    for replay in range(3):
        x.fill_(float(rank + 1 + replay))
        g.replay()
        torch.cuda.synchronize()
        want = float(sum(r + 1 + replay for r in range(world)))
        expect(f"graph replay {replay}", x, torch.full((n,), want))
    print(f"rank {rank}: graph all-reduce captured once, replayed 3 times exactly", flush=True)


if __name__ == "__main__":
    with mp.Manager() as m:
        failures = m.list()
        mp.spawn(rank_main, args=(2, 29517, failures), nprocs=2, join=True)
        if failures:
            print("\n".join(failures))
            sys.exit(1)
    print("torch.distributed (nccl backend via Strata): all_reduce, all_gather, reduce_scatter, broadcast, send/recv, DDP steps, graph capture OK")
