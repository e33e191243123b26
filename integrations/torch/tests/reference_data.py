"""The tests' data, from Strata's reference module (src/verify/reference.h, loaded with
ctypes from libstrata-reference.so: STRATA_REFERENCE_LIB names it): every element
depends on (rank, position) as far as its type allows, and every reduction of it over
the world is exact, wrapping in integer types as integer arithmetic does.

Types NCCL lacks take theirs from a neighbour: int16 from int32 (truncated: its sums
wrap the same way), bool from uint8's low bit, complex64 from two float32 streams."""
import ctypes
import os

import torch

_NCCL = {torch.int8: 0, torch.uint8: 1, torch.int32: 2, torch.int64: 4, torch.float16: 6, torch.float32: 7,
         torch.float64: 8, torch.bfloat16: 9}
_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}
_STRIDE = 1_000_003  # each salt its own range of positions (odd, so no power-of-two alignment)
_lib = None


def _library():
    global _lib
    if _lib is None:
        path = os.environ.get("STRATA_REFERENCE_LIB")
        if not path:
            raise RuntimeError("STRATA_REFERENCE_LIB is not set: it names build/lib/libstrata-reference.so")
        _lib = ctypes.CDLL(path)
        for f in (_lib.strata_reference_input, _lib.strata_reference_reduced):
            f.restype = ctypes.c_int
        _lib.strata_reference_input.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                                ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p]
    return _lib


def _fill(nccl_dtype, torch_dtype, op, world, rank, first, n):
    t = torch.empty(n, dtype=torch_dtype)
    if n and _library().strata_reference_input(_NCCL[nccl_dtype], _OPS[op], world, rank, first, n,
                                               ctypes.c_void_p(t.data_ptr())) != 0:
        raise ValueError(f"reference input refused {torch_dtype} {op} rank {rank} of {world}")
    return t


def data(rank, world, n, dtype, salt=0, op="sum"):
    """Rank `rank`'s n elements for a reduction with `op` ("sum", "prod", "max", "min",
    "avg") over `world` ranks, or for moving data (op "sum"); `salt` picks another
    range of positions (a reduce-scatter's chunk, an all-to-all's receiver)."""
    first = salt * _STRIDE
    if dtype in _NCCL:
        return _fill(dtype, dtype, op, world, rank, first, n)
    if dtype == torch.int16:
        return _fill(torch.int32, torch.int32, op, world, rank, first, n).to(torch.int16)
    if dtype == torch.bool:
        return _fill(torch.uint8, torch.uint8, op, world, rank, first, n) % 2 == 1
    if dtype == torch.complex64:
        re = _fill(torch.float32, torch.float32, op, world, rank, first, n)
        im = _fill(torch.float32, torch.float32, op, world, rank, first + _STRIDE // 2, n)
        return torch.complex(re, im)
    raise ValueError(f"no reference data for {dtype}")
