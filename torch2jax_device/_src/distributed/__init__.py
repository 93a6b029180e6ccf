"""``torch.distributed`` on ``jax.distributed``: process groups, rendezvous, meshes.

* ``rendezvous``: who this process is, read from torchrun's environment (no JAX);
* ``process_group``: ``init_process_group`` and the calls that need a group;
* ``mesh``: device meshes and global batches.
"""
