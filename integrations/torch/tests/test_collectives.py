"""Every collective of the "strata" backend, every dtype: results checked exactly
against a reference computed from every rank's inputs, and against the same call
on Gloo wherever Gloo has it.

usage: test_collectives.py WORLD
"""
import sys

import torch
import torch.distributed as dist

import reference_data
from launch import run_ranks

R = dist.ReduceOp
DTYPES = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64, torch.bool, torch.complex64]
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def ops_for(dtype):
    if dtype == torch.bool:
        return [R.SUM, R.PRODUCT, R.MIN, R.MAX]
    if dtype.is_complex:
        return [R.SUM, R.AVG]
    return [R.SUM, R.PRODUCT, R.MIN, R.MAX] + ([R.AVG] if dtype in FLOATS else [])


WORLD = 0  # set by rank_main
OP_NAMES = {R.SUM: "sum", R.PRODUCT: "prod", R.MIN: "min", R.MAX: "max", R.AVG: "avg"}


def data(rank, n, dtype, salt=0, op=R.SUM):
    """Rank `rank`'s n elements (reference_data): distinct per rank and position, and
    every reduction over the world exact."""
    return reference_data.data(rank, WORLD, n, dtype, salt, OP_NAMES[op])


def reference(op, stack):
    """Integers in int64, wrapping as integer arithmetic does, then truncated to the
    inputs' type; floating types in a wide type (exact for these inputs), then rounded
    once to the inputs' type."""
    dtype = stack.dtype
    if dtype == torch.bool:
        return {R.SUM: stack.any(0), R.PRODUCT: stack.all(0), R.MIN: stack.all(0), R.MAX: stack.any(0)}[op]
    if dtype.is_complex:
        wide = stack.to(torch.complex128)
    elif dtype.is_floating_point:
        wide = stack.to(torch.float64)
    else:
        wide = stack.to(torch.int64)
    out = {R.SUM: lambda: wide.sum(0), R.PRODUCT: lambda: wide.prod(0), R.MIN: lambda: wide.amin(0),
           R.MAX: lambda: wide.amax(0), R.AVG: lambda: wide.sum(0) / stack.shape[0]}[op]()
    return out.to(dtype)


class Checker:
    def __init__(self, rank, world, gloo, strata):
        self.rank, self.world, self.gloo, self.strata = rank, world, gloo, strata
        self.errors, self.checks, self.gloo_checks, self.gloo_missing = [], 0, 0, set()

    def expect(self, what, got, want):
        self.checks += 1
        if got.dtype != want.dtype or got.shape != want.shape:
            self.errors.append(f"rank {self.rank}: {what}: got {got.dtype} {tuple(got.shape)}, "
                               f"expected {want.dtype} {tuple(want.shape)}")
        elif not torch.equal(got, want):
            g, w = got.flatten(), want.flatten()
            i = (g != w).nonzero()[0].item()
            self.errors.append(f"rank {self.rank}: {what}: element {i} of {g.numel()} is {g[i].item()}, "
                               f"expected {w[i].item()} ({got.dtype})")

    def both(self, what, call, outputs_of):
        """Runs call(group) on strata and on gloo (fresh tensors each) and compares them.
        Returns strata's outputs."""
        mine = outputs_of(call(self.strata))
        try:
            theirs = outputs_of(call(self.gloo))
        except RuntimeError as e:  # gloo lacks this call or type
            self.gloo_missing.add(f"{what.split('[')[0]}: {str(e).splitlines()[0][:60]}")
            return mine
        self.gloo_checks += 1
        for a, b in zip(mine, theirs):
            self.expect(f"{what} (strata vs gloo)", a, b)
        return mine


def reductions(c, dtype):
    rank, world = c.rank, c.world
    for op in ops_for(dtype):
        for n, shape in ((1000, None), (40, (8, 5)), (1 << 18, None)):
            if n == 1 << 18 and op != R.SUM:
                continue
            stack = torch.stack([data(r, n, dtype, op=op) for r in range(world)])
            want = reference(op, stack)

            def call(g, n=n, shape=shape, op=op):
                t = data(rank, n, dtype, op=op)
                if shape:  # non-contiguous: a transposed view
                    t = t.view(shape[1], shape[0]).t()
                dist.all_reduce(t, op=op, group=g)
                return t
            got = c.both(f"all_reduce[{dtype},{op},{n}]", call, lambda t: [t.reshape(-1)])[0]
            if shape:
                want = want.view(shape[1], shape[0]).t().reshape(-1)
            c.expect(f"all_reduce {dtype} {op} n={n}", got, want)
        root = 1 % world
        stack = torch.stack([data(r, 100, dtype, op=op) for r in range(world)])

        def rcall(g, op=op):
            t = data(rank, 100, dtype, op=op)
            dist.reduce(t, dst=root, op=op, group=g)
            return t
        # (Gloo uses the input of a non-root rank as scratch: compared at the root only)
        kept = []
        c.both(f"reduce[{dtype},{op}]", rcall, lambda t: kept.append(t) or ([t] if rank == root else []))
        c.expect(f"reduce {dtype} {op}", kept[0], reference(op, stack) if rank == root else data(rank, 100, dtype, op=op))
        # reduce-scatter, list and tensor forms
        parts = [torch.stack([data(r, 30, dtype, salt=k, op=op) for r in range(world)]) for k in range(world)]
        want = reference(op, parts[rank])

        def rs(g, op=op):
            out = torch.empty(30, dtype=dtype)
            dist.reduce_scatter(out, [data(rank, 30, dtype, salt=k, op=op) for k in range(world)], op=op, group=g)
            return out
        c.expect(f"reduce_scatter {dtype} {op}", c.both(f"reduce_scatter[{dtype}]", rs, lambda t: [t])[0], want)
        out = torch.empty(30, dtype=dtype)
        dist.reduce_scatter_tensor(out, torch.cat([data(rank, 30, dtype, salt=k, op=op) for k in range(world)]), op=op,
                                   group=c.strata)
        c.expect(f"reduce_scatter_tensor {dtype} {op}", out, want)


def premul(c):
    rank, world = c.rank, c.world
    for dtype in (torch.float32, torch.float64, torch.float16):
        t = data(rank, 64, dtype)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5), group=c.strata)
        want = (torch.stack([data(r, 64, dtype) for r in range(world)]).double() * 0.5).sum(0).to(dtype)
        c.expect(f"all_reduce premul_sum {dtype}", t, want)


def movement(c, dtype):
    rank, world = c.rank, c.world
    last = world - 1

    def bcast(g):
        t = data(rank, 40, dtype).view(5, 8).t()  # non-contiguous
        dist.broadcast(t, src=last, group=g)
        return t
    got = c.both(f"broadcast[{dtype}]", bcast, lambda t: [t])[0]
    c.expect(f"broadcast {dtype}", got, data(last, 40, dtype).view(5, 8).t())

    def gather_list(g):
        outs = [torch.empty(33, dtype=dtype) for _ in range(world)]
        outs[0] = torch.empty(66, dtype=dtype)[::2]  # a non-contiguous output
        dist.all_gather(outs, data(rank, 33, dtype), group=g)
        return outs
    got = c.both(f"all_gather[{dtype}]", gather_list, lambda outs: outs)
    for r in range(world):
        c.expect(f"all_gather {dtype} [{r}]", got[r], data(r, 33, dtype))
    flat = torch.empty(33 * world, dtype=dtype)
    dist.all_gather_into_tensor(flat, data(rank, 33, dtype), group=c.strata)
    c.expect(f"all_gather_into_tensor {dtype}", flat, torch.cat([data(r, 33, dtype) for r in range(world)]))

    def gather(g):
        outs = [torch.empty(17, dtype=dtype) for _ in range(world)] if rank == 0 else None
        dist.gather(data(rank, 17, dtype), gather_list=outs, dst=0, group=g)
        return outs or []
    got = c.both(f"gather[{dtype}]", gather, lambda outs: outs)
    for r in range(world if rank == 0 else 0):
        c.expect(f"gather {dtype} [{r}]", got[r], data(r, 17, dtype))

    def scatter(g):
        out = torch.empty(19, dtype=dtype)
        ins = [data(k, 19, dtype, salt=5) for k in range(world)] if rank == last else None
        dist.scatter(out, scatter_list=ins, src=last, group=g)
        return out
    got = c.both(f"scatter[{dtype}]", scatter, lambda t: [t])[0]
    c.expect(f"scatter {dtype}", got, data(rank, 19, dtype, salt=5))
    alltoall(c, dtype)


def alltoall(c, dtype):
    rank, world = c.rank, c.world
    # equal blocks of 3 rows x 4
    inp = torch.stack([data(rank, 4, dtype, salt=k) for k in range(3 * world)])

    def equal(g):
        out = torch.empty(3 * world, 4, dtype=dtype)
        dist.all_to_all_single(out, inp.clone(), group=g)
        return out
    got = c.both(f"all_to_all_single[{dtype}]", equal, lambda t: [t])[0]
    want = torch.cat([torch.stack([data(r, 4, dtype, salt=k) for k in range(3 * rank, 3 * rank + 3)])
                      for r in range(world)])
    c.expect(f"all_to_all_single {dtype}", got, want)
    # unequal: rank r sends (r + k) % 3 + 1 rows to rank k
    rows = lambda r, k: (r + k) % 3 + 1  # noqa: E731
    block = lambda r, k: data(r, rows(r, k) * 2, dtype, salt=100 + k).view(rows(r, k), 2)  # noqa: E731
    send = torch.cat([block(rank, k) for k in range(world)])

    def unequal(g):
        out = torch.empty(sum(rows(r, rank) for r in range(world)), 2, dtype=dtype)
        dist.all_to_all_single(out, send.clone(), output_split_sizes=[rows(r, rank) for r in range(world)],
                               input_split_sizes=[rows(rank, k) for k in range(world)], group=g)
        return out
    got = c.both(f"all_to_all_single unequal[{dtype}]", unequal, lambda t: [t])[0]
    want = torch.cat([block(r, rank) for r in range(world)])
    c.expect(f"all_to_all_single unequal {dtype}", got, want)

    def listed(g):
        outs = [torch.empty(k + 2, dtype=dtype) for k in range(world)]
        dist.all_to_all(outs, [data(rank, rank + 2, dtype, salt=k) for k in range(world)], group=g)
        return outs
    got = c.both(f"all_to_all[{dtype}]", listed, lambda outs: outs)
    for r in range(world):
        c.expect(f"all_to_all {dtype} [{r}]", got[r], data(r, r + 2, dtype, salt=rank))


def point_to_point(c):
    rank, world = c.rank, c.world
    g = c.strata
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    f32 = torch.float32
    for n in (5, 1 << 20):  # within the slots, and much more than them
        got = torch.empty(n, dtype=f32)
        ops = [dist.P2POp(dist.isend, data(rank, n, f32, salt=7), nxt, g), dist.P2POp(dist.irecv, got, prv, g)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        c.expect(f"batch_isend_irecv ring n={n}", got, data(prv, n, f32, salt=7))
    if rank in (0, 1):
        i64 = torch.int64
        t = data(rank, 10, i64, salt=8)
        other = 1 - rank
        if rank == 0:
            dist.send(t, dst=other, group=g)
            dist.recv(t, src=other, group=g)
            c.expect("send/recv 1->0", t, data(1, 10, i64, salt=8))
        else:
            got = torch.empty(10, dtype=i64)
            dist.recv(got, src=other, group=g)
            c.expect("send/recv 0->1", got, data(0, 10, i64, salt=8))
            dist.send(t, dst=other, group=g)


def asynchronous(c):
    rank, world = c.rank, c.world
    f32 = torch.float32
    ts = [data(rank, 1000, f32, salt=10 + k) for k in range(4)]
    wants = [reference(R.SUM, torch.stack([data(r, 1000, f32, salt=10 + k) for r in range(world)])) for k in range(4)]
    works = [dist.all_reduce(t, group=c.strata, async_op=True) for t in ts]
    for k, (t, w) in enumerate(zip(ts, works)):
        w.wait()
        if not w.is_completed():
            c.errors.append(f"rank {rank}: work {k} not completed after wait")
        c.expect(f"async all_reduce {k}", t, wants[k])
    fut = dist.all_reduce(data(rank, 8, f32, salt=20), group=c.strata, async_op=True).get_future()
    c.expect("future value", fut.wait()[0], reference(R.SUM, torch.stack([data(r, 8, f32, salt=20) for r in range(world)])))
    dist.barrier(group=c.strata)
    works = []
    ts = [data(rank, 1000, f32, salt=30 + k) for k in range(3)]
    from torch.distributed.distributed_c10d import _coalescing_manager
    with _coalescing_manager(c.strata, works):  # as batch_isend_irecv uses it, with collectives
        for k in range(3):
            works.append(dist.all_reduce(ts[k], group=c.strata, async_op=True))
    for w in works:
        w.wait()
    for k in range(3):
        c.expect(f"coalesced all_reduce {k}", ts[k],
                 reference(R.SUM, torch.stack([data(r, 1000, f32, salt=30 + k) for r in range(world)])))


def rank_main(rank, world):
    import strata_torch  # noqa: F401
    dist.init_process_group("strata", init_method="env://")  # the default group on Strata
    strata = dist.group.WORLD
    gloo = dist.new_group(backend="gloo")
    global WORLD
    WORLD = world
    c = Checker(rank, world, gloo, strata)
    for dtype in DTYPES:
        reductions(c, dtype)
        movement(c, dtype)
    premul(c)
    point_to_point(c)
    asynchronous(c)
    dist.barrier()
    if rank == 0:
        print(f"{c.checks} exact checks, {c.gloo_checks} of them against the same call on Gloo; Gloo lacks: "
              + "; ".join(sorted(c.gloo_missing)))
    if c.errors:
        raise AssertionError(f"{len(c.errors)} wrong results:\n" + "\n".join(c.errors[:20]))
    dist.destroy_process_group()


if __name__ == "__main__":
    run_ranks(rank_main, int(sys.argv[1]), deadline=600)
