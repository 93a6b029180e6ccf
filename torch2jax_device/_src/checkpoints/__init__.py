"""Checkpoints onto the device you name: safetensors files and PyTorch checkpoints.

Layers, each importing only those below it (``tests/project/test_import_graph.py``):

* bytes and formats, no JAX: ``messages`` (bounded quotes of values), ``format`` (the
  safetensors header and its checks), ``reader`` / ``writer`` (memory maps, reads,
  atomic aligned writes), ``source`` (what a load was given, and its format),
  ``index`` (``*.index.json`` of shard files), ``object_graph`` (an unpickled
  checkpoint, walked), ``progress``;
* arguments and transfers: ``options``, ``map_location``, ``transfer`` (tensors onto a
  device, in place from the map or through bounded staging);
* one device: ``one_device`` (a safetensors file, ``TensorSlice``), ``pickled``
  (``torch.load`` and its tensors as arrays);
* a mesh, a client of the one-device path: ``sharded`` (each process reads its parts;
  indexes of shards), with ``agreement`` (processes loading together agree on what
  each tensor is);
* the public entry points, which choose between them: ``safetensors`` (``load_file``,
  ``safe_open``, ``save_file``), ``torch_load`` (``load``) and ``module_state``
  (``state_dict``, ``load_state``).
"""
