"""``torch.distributed`` on ``jax.distributed``: process groups, rendezvous, meshes.

* ``rendezvous``: who this process is, read from torchrun's environment (no JAX);
* ``process_group``: ``init_process_group`` and the calls that need a group;
* ``mesh``: device meshes and global batches.

Importing this package (``torch2jax_device._src`` does, first thing) asks the platform
table to join a launched job before tj starts JAX's backends.
"""

from __future__ import annotations

import os

from .. import platforms


def _join_launched_job() -> None:
    """Under a launcher (``RANK`` and ``WORLD_SIZE`` set), join its job first.

    ``jax.distributed`` must start before the backends, and PyTorch scripts ask
    ``torch.cuda.is_available()`` before ``init_process_group``: see
    ``process_group.join_launched_job``. Outside a launcher nothing is imported.
    """
    if "WORLD_SIZE" in os.environ and "RANK" in os.environ:
        from .process_group import join_launched_job

        join_launched_job()


platforms.call_before_backends_start(_join_launched_job)
