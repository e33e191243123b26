"""torch.distributed on Strata, for CPU tensors.

``import strata_torch`` registers the backend ``"strata"``; then
``torch.distributed.init_process_group("strata", ...)`` works with any of PyTorch's
rendezvous methods (env://, tcp://, file://, or a Store), and ``new_group(backend="strata")``
too. The unique id of each group's communicator travels through the group's store.
"""
import torch.distributed as _dist

from . import _C

__all__ = ["nccl_version"]

nccl_version = _C.nccl_version


def _create(store, rank, world_size, timeout):
    return _C.create_process_group(store, rank, world_size, timeout)


if not hasattr(_dist.Backend, "STRATA"):
    _dist.Backend.register_backend("strata", _create)
