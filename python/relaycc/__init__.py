"""relaycc from Python and PyTorch: collectives for subsets of a node's ranks, idle ranks as helpers.

    comm = relaycc.Comm.shm()                        # CPU tensors, one process per rank (torchrun's RANK)
    comm = relaycc.Comm.from_process_group()         # CUDA tensors, NCCL (after dist.init_process_group)
    relaycc.all_reduce(t if active else None, [[0, 1]], comm=comm, counts=[n], dtype=torch.float32)

Every rank calls every collective with the same layout, counts and dtype; a helper (a rank in no group)
passes None. A binding never rejects a call on its own: a bad argument on one rank is a rejected call of
the C library there (relayCallReject), so the ranks stay in step and the error raised is the library's,
naming the argument and the rank (README "After a rejected call"). Eager calls go straight to the library;
under torch.compile they are torch ops (torch.ops.relaycc.*) with the ordered effect, which the graph keeps
and orders. On CUDA they run on the current stream without host synchronization. Every constant (dtypes,
ops, routes, collectives, result codes) is read from the library.
"""
from ._lib import RelayccArgumentError, RelayccError, library_path, version
from .collectives import (all_gather, all_reduce, all_to_all, all_to_all_v_single, barrier, broadcast, gather,
                          recv, reduce, reduce_scatter, scatter, send)
from .comm import Comm, Work, nccl_libraries
from . import torch_backend

# "relaycc" as a torch.distributed backend (CPU tensors): init_process_group("relaycc"), new_group(...,
# backend="relaycc"); compiled against this torch on first use (torch_backend.py).
if torch_backend.dist.is_available():
  torch_backend.register()

# The C library's version (project(relaycc VERSION ...) is the one source; the wheel's metadata reads it too).
__version__ = "%d.%d.%d" % (version() // 10000, version() // 100 % 100, version() % 100)
__all__ = [
    "Comm", "Work", "RelayccError", "RelayccArgumentError", "all_reduce", "reduce_scatter", "all_gather",
    "all_to_all", "scatter", "gather", "broadcast", "reduce", "barrier", "send", "recv", "all_to_all_v_single",
    "version", "library_path", "nccl_libraries"
]
