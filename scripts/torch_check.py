"""torch.distributed on backend "nccl" through Strata's libnccl.so.2 (preloaded by
scripts/gpu-check.sh): world size 2, both ranks on cuda:0, every call checked exactly
against the reference data (reference_data.py, STRATA_REFERENCE_LIB), including the
patterns that must stay on the device path: all_to_all with a piece to self, an
uneven all_to_all_single, batch_isend_irecv with a send to self, and an all-reduce
captured in a CUDA graph (a refused capture is a failure)."""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import reference_data

WORLD = 2
F32 = torch.float32


def rank_main(rank, world, port, failures):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda:0"))
    dev = torch.device("cuda:0")
    errors = []

    def ref(r, n, salt=0, dtype=F32):
        return reference_data.data(r, world, n, dtype, salt).to(dev)

    def summed(n, salt, dtype=F32):
        return torch.stack([ref(r, n, salt, dtype).double() for r in range(world)]).sum(0).to(dtype)

    def expect(name, got, want):
        if not torch.equal(got.cpu(), want.cpu()):
            bad = (got.cpu() != want.cpu()).nonzero()
            at = bad[0].item() if bad.numel() else -1
            errors.append(f"rank {rank}: {name}: element {at} is {got.flatten()[at].item()}, "
                          f"expected {want.flatten()[at].item()}")

    n = 1 << 16
    x = ref(rank, n, 0)
    dist.all_reduce(x)
    expect("all_reduce", x, summed(n, 0))
    parts = [torch.empty(n, device=dev) for _ in range(world)]
    dist.all_gather(parts, ref(rank, n, 1))
    for r in range(world):
        expect(f"all_gather[{r}]", parts[r], ref(r, n, 1))
    out = torch.empty(n, device=dev)
    dist.reduce_scatter(out, [ref(rank, n, 10 + k) for k in range(world)])
    expect("reduce_scatter", out, summed(n, 10 + rank))
    b = ref(rank, n, 2)
    dist.broadcast(b, src=1)
    expect("broadcast", b, ref(1, n, 2))
    if rank == 0:
        dist.send(ref(0, n, 3), dst=1)
    else:
        got = torch.empty(n, device=dev)
        dist.recv(got, src=0)
        expect("send/recv", got, ref(0, n, 3))
    pairwise_patterns(rank, world, dev, ref, expect)
    ddp_steps(rank, world, dev, expect)
    graph_all_reduce(rank, world, dev, ref, summed, expect, errors)
    torch.cuda.synchronize()
    dist.destroy_process_group()
    failures.extend(errors)


def pairwise_patterns(rank, world, dev, ref, expect):
    """What PyTorch turns into sends and receives that include one to self."""
    m = 3000
    outs = [torch.empty(m, device=dev) for _ in range(world)]
    dist.all_to_all(outs, [ref(rank, m, 100 + k) for k in range(world)])
    for r in range(world):
        expect(f"all_to_all[{r}]", outs[r], ref(r, m, 100 + rank))
    rows = lambda r, k: (r + k) % 3 + 1  # noqa: E731  rank r sends rows(r, k) rows of 5 to rank k
    block = lambda r, k: ref(r, rows(r, k) * 5, 200 + k).view(rows(r, k), 5)  # noqa: E731
    got = torch.empty(sum(rows(r, rank) for r in range(world)), 5, device=dev)
    dist.all_to_all_single(got, torch.cat([block(rank, k) for k in range(world)]),
                           output_split_sizes=[rows(r, rank) for r in range(world)],
                           input_split_sizes=[rows(rank, k) for k in range(world)])
    expect("all_to_all_single uneven", got, torch.cat([block(r, rank) for r in range(world)]))
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    to_self, from_prev = torch.empty(m, device=dev), torch.empty(m, device=dev)
    ops = [dist.P2POp(dist.isend, ref(rank, m, 300), rank), dist.P2POp(dist.irecv, to_self, rank),
           dist.P2POp(dist.isend, ref(rank, m, 301), nxt), dist.P2POp(dist.irecv, from_prev, prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    expect("batch_isend_irecv to self", to_self, ref(rank, m, 300))
    expect("batch_isend_irecv ring", from_prev, ref(prv, m, 301))


def ddp_steps(rank, world, dev, expect):
    """Three DistributedDataParallel steps on a linear layer, each rank's batch its own
    reference data (half-precision values: every gradient sum and mean exact in float)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4).to(dev)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.125)
    batch = 8

    def inputs(r, step):
        return reference_data.data(r, world, batch * 16, torch.float16, 400 + step).float().view(batch, 16).to(dev)

    for step in range(3):
        opt.zero_grad()
        ddp(inputs(rank, step)).sum().backward()
        mean_cols = torch.stack([inputs(r, step).sum(0) for r in range(world)]).double().mean(0).float()
        expect(f"ddp step {step} weight grad", model.weight.grad, mean_cols.expand(4, 16))
        expect(f"ddp step {step} bias grad", model.bias.grad, torch.full((4,), float(batch), device=dev))
        opt.step()
    mine = torch.cat([p.detach().flatten() for p in model.parameters()])
    theirs = mine.clone()
    dist.broadcast(theirs, src=0)
    expect("ddp parameters equal on every rank", mine, theirs)


def graph_all_reduce(rank, world, dev, ref, summed, expect, errors):
    """An all-reduce captured once in a CUDA graph and replayed three times with new
    inputs; a refused capture fails the check."""
    n = 1 << 12
    x = ref(rank, n, 500)
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
        errors.append(f"rank {rank}: graph capture refused: {msg.splitlines()[0] if msg else ''}")
        return
    for replay in range(3):
        x.copy_(ref(rank, n, 501 + replay))
        g.replay()
        torch.cuda.synchronize()
        expect(f"graph replay {replay}", x, summed(n, 501 + replay))
    print(f"rank {rank}: graph all-reduce captured once, replayed 3 times exactly", flush=True)


if __name__ == "__main__":
    with mp.Manager() as m:
        failures = m.list()
        mp.spawn(rank_main, args=(WORLD, 29517, failures), nprocs=WORLD, join=True)
        if failures:
            print("\n".join(failures))
            sys.exit(1)
    print("torch.distributed (nccl backend via Strata): all_reduce, all_gather, reduce_scatter, broadcast, send/recv, "
          "all_to_all with self, uneven all_to_all_single, batch_isend_irecv with self, DDP steps, graph capture: exact")
