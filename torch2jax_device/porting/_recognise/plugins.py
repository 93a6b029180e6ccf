"""Other accelerators' torch plugins imported, section "Devices and availability" (round 9's
held-out set G: Open-Sora-Plan on Ascend NPUs).

``import torch_npu`` (``torch_mlu``, ``torch_musa``, Habana's ``habana_frameworks.torch.core``)
outside a ``try:`` is the plugin the script needs to run (``xpu-npu-other``); guarded by a
``try:`` it is optional, the script runs without it, and the calls of the device module
it adds are reported where they are made (the wild corpus's ``xla_mnist`` and
``test_scan_rows``' Ascend helper leave the guarded import unlabelled).
``from torch_npu.contrib import transfer_to_npu`` patches ``torch.cuda``'s calls and
``"cuda"`` devices onto the NPU (``xpu-npu-other``), guarded or not: the import alone does
the work, so the import is the line a porter must look at.
"""

from __future__ import annotations

import ast

from .base import Recogniser

__all__ = ["plugin_imported"]

_PLUGINS = frozenset({"torch_npu", "torch_mlu", "torch_musa", "habana_frameworks.torch.core"})
# Modules whose import patches torch's CUDA calls onto another accelerator -> the names.
_PATCHES = {"torch_npu.contrib": frozenset({"transfer_to_npu"})}
_PLUGIN = "nothing to import: JAX runs on the accelerator its installed plugin gives"
_PATCH = "nothing to patch: tj.cuda's calls and tj.device answer for JAX's accelerator"


def plugin_imported(r: Recogniser, node: ast.Import | ast.ImportFrom) -> None:
    """``import torch_npu``; ``from torch_npu.contrib import transfer_to_npu``."""
    if id(node) in r.reported:
        return
    if isinstance(node, ast.Import):
        parent = r.parent(node)
        guarded = isinstance(parent, ast.Try) and node in parent.body
        if not guarded and any(alias.name in _PLUGINS for alias in node.names):
            r.add(node, "xpu-npu-other", _PLUGIN)
    elif (
        node.module in _PATCHES
        and not node.level
        and any(alias.name in _PATCHES[node.module] for alias in node.names)
    ):
        r.add(node, "xpu-npu-other", _PATCH)
