"""`torch.distributed` for JAX: torchrun jobs, device meshes and metric reductions.

A data-parallel PyTorch script launched with `torchrun` ports line by line and
lands on JAX's own multi-process engine (`jax.distributed`, a global `Mesh`,
`NamedSharding`, `jax.make_array_from_process_local_data`), not on an imitation
of PyTorch's process groups:

```python
from torch2jax_device import distributed as dist

dist.init_process_group(backend="nccl")    # jax.distributed.initialize, once per process
rank, world_size = dist.get_rank(), dist.get_world_size()
mesh = dist.init_device_mesh("cuda", (jax.device_count(),), mesh_dim_names=("data",))
tj.to_device(model, device)                                 # model.to(device)
tj.to_device(model, NamedSharding(mesh, P()))               # DDP(model): replicated
batch = dist.make_global_batch(local_batch, mesh)           # DistributedSampler shards
loss = train_step(model, optimizer, batch)  # jit: XLA averages the gradients
metric = dist.all_reduce(local_metric, op="mean")           # dist.all_reduce
dist.destroy_process_group()
```

[`init_process_group`][torch2jax_device.distributed.init_process_group] reads what
torchrun (or `torch2jax-device run`, or a SLURM script) puts in the environment and
must run before JAX calls start JAX's backends; tj's own availability queries may come
first, as in PyTorch scripts. With several processes on a host, each one owns the GPU
`LOCAL_RANK` names, as `cuda:{LOCAL_RANK}` does in the PyTorch script. The
[distributed guide](distributed.md) covers multi-host jobs, TPU pods, loading
checkpoints onto a mesh and what happens when a process fails.

Examples:
    >>> from torch2jax_device import distributed as dist
    >>> dist.is_initialized()
    False
"""

from __future__ import annotations

from ._src.distributed.mesh import init_device_mesh as init_device_mesh
from ._src.distributed.mesh import make_global_batch as make_global_batch
from ._src.distributed.process_group import ReduceOp as ReduceOp
from ._src.distributed.process_group import all_reduce as all_reduce
from ._src.distributed.process_group import barrier as barrier
from ._src.distributed.process_group import destroy_process_group as destroy_process_group
from ._src.distributed.process_group import get_local_rank as get_local_rank
from ._src.distributed.process_group import get_rank as get_rank
from ._src.distributed.process_group import get_world_size as get_world_size
from ._src.distributed.process_group import init_process_group as init_process_group
from ._src.distributed.process_group import is_initialized as is_initialized
from ._src.errors import DistributedError as DistributedError

__all__ = [
    "DistributedError",
    "ReduceOp",
    "all_reduce",
    "barrier",
    "destroy_process_group",
    "get_local_rank",
    "get_rank",
    "get_world_size",
    "init_device_mesh",
    "init_process_group",
    "is_initialized",
    "make_global_batch",
]


def __getattr__(name: str) -> object:
    """``tj.distributed.<name>`` for a ``torch.distributed`` name this module does not map
    (``all_gather``, ``new_group``, ``broadcast``...): the library's error, naming the torch
    name and the fix, instead of Python's."""
    from ._src.errors import NoSuchAttributeError

    raise NoSuchAttributeError.unmapped("distributed", name)
