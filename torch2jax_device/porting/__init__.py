"""Porting tools: the idiom catalog, the scanner behind ``torch2jax-device scan``, the guide.

Nothing here is imported by ``import torch2jax_device``: it is tooling for porting a
script and for the documentation, loaded when asked for (``tj.porting``).

* ``catalog``: one row per PyTorch idiom (PyTorch / plain JAX / torch2jax_device);
* ``scanner``: finds the idioms in Python source and rewrites those whose rewrite is
  correct on its own: ``_source`` reads a file (over ``_names``, Python's scoping
  rules; ``_values``, what a value is; ``_flow``, where it goes), ``_recognise``
  proposes findings per catalog section, ``_plan`` and ``_startup`` decide which
  rewrites stand, ``_rewrites`` composes them inside out;
* ``guide``: renders the catalog as the migration guide's tables.
* ``known_differences``: where ``tj.to_device`` answers differently from torch's
  ``Tensor.to``, as one table (which calls, what differs, why, the docs heading), read by
  the side-by-side fuzzer and held to ``docs/known-differences*.md`` by a test.
"""
