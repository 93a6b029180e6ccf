"""Checkpoints onto the device you name: safetensors files and PyTorch checkpoints.

* ``format``: the safetensors header and its checks (no JAX);
* ``reader`` / ``writer``: bytes between files and host memory: memory maps, reads,
  atomic aligned writes (no JAX);
* ``transfer``: tensors onto a device, in place from the map or through bounded staging;
* ``safetensors``: ``load_file``, ``safe_open``, ``save_file`` (the safetensors verbs);
* ``torch_load``: ``load``, ``torch.load`` with ``map_location`` for JAX users;
* ``progress``: the progress bar of long loads.
"""
