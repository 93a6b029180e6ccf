"""The objects torch hands back, known by where they were made (round 9's development
set: DINO, DLRM, FlagEmbedding).

- The work of an asynchronous collective waited for: ``work = dist.all_gather(out, x,
  async_op=True)`` then ``work.wait()`` (``dist-other``): JAX's collectives hand back
  their result, and ``jax.block_until_ready`` waits for an array.
- A profiler's report: ``prof.key_averages().table(...)``, ``prof.export_chrome_trace(p)``
  on ``prof`` made by ``torch.profiler.profile`` / ``torch.autograd.profiler.profile``
  (a ``with ... as prof:`` or an assignment) (``profiler``): ``jax.profiler.trace``
  writes the trace TensorBoard and Perfetto read.
- A model's tensors moved to shared memory for worker processes,
  ``model.share_memory()`` (``mp-spawn``): JAX's arrays are not shared with other
  processes; each worker loads its own copy, or one process drives every device.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from .base import Recogniser

__all__ = ["model_shared", "profiler_report", "sampler_epoch", "work_waited"]

# torch's profilers, whose object's methods report what was recorded.
_PROFILERS = frozenset({"torch.profiler.profile", "torch.autograd.profiler.profile"})
# The profiler's methods that report or export the recording -> the advice that fits.
_TRACE = 'jax.profiler.start_trace("/tmp/trace")  # before the profiled code, stop_trace() after'
_PROFILER_METHODS = {
    "key_averages": (
        f"{_TRACE}: TensorBoard's profile plugin (or Perfetto) shows the time per op, "
        "JAX has no key_averages table"
    ),
    "export_chrome_trace": (
        'jax.profiler.start_trace("/tmp/trace", create_perfetto_trace=True)  # before the '
        "profiled code: stop_trace() writes a Perfetto (Chrome) trace under /tmp/trace"
    ),
    "export_stacks": f"{_TRACE}: the trace holds the Python stacks",
    "export_memory_timeline": (
        'jax.profiler.save_device_memory_profile("memory.prof")  # the device memory now'
    ),
    "step": (
        'with jax.profiler.StepTraceAnnotation("train", step_num=step): ...  # marks a step '
        "in the trace"
    ),
}
_WAITED = (
    "nothing to wait for: multihost_utils.process_allgather (and tj.distributed.all_reduce) "
    "hand back their result; jax.block_until_ready(x) waits for an array"
)
_SHARED = (
    "nothing: JAX's arrays are not shared with other processes; each worker loads the "
    "model itself (or one process drives every device through a mesh)"
)


def work_waited(r: Recogniser, call: ast.Call) -> None:
    """``dist-other``: ``work.wait()`` where every binding of ``work`` is a call of a
    torch.distributed collective (``async_op=True``, ``dist.isend``...)."""
    func = call.func
    if not (
        isinstance(func, ast.Attribute)
        and func.attr == "wait"
        and isinstance(func.value, ast.Name)
        and id(call) not in r.reported
    ):
        return
    if _made_by(r, func.value, lambda name: name.startswith("torch.distributed.")):
        r.add(call, "dist-other", _WAITED, position=r.file.method_position(func))


def profiler_report(r: Recogniser, call: ast.Call) -> None:
    """``profiler``: ``prof.key_averages()``, ``prof.export_chrome_trace(path)`` on a
    profiler of torch's."""
    func = call.func
    if not (
        isinstance(func, ast.Attribute)
        and func.attr in _PROFILER_METHODS
        and isinstance(func.value, ast.Name)
        and id(call) not in r.reported
    ):
        return
    if _made_by(r, func.value, lambda name: name in _PROFILERS):
        r.add(
            call,
            "profiler",
            _PROFILER_METHODS[func.attr],
            position=r.file.method_position(func),
        )


def model_shared(r: Recogniser, call: ast.Call) -> None:
    """``mp-spawn``: ``model.share_memory()`` on a module, before starting workers."""
    func = call.func
    if not (
        isinstance(func, ast.Attribute)
        and func.attr == "share_memory"
        and not call.args
        and not call.keywords
        and id(call) not in r.reported
        and r.qualname(func) is None
    ):
        return
    if r.file.values.module_framework(func.value) in ("torch", "module"):
        r.add(call, "mp-spawn", _SHARED, position=r.file.method_position(func))


def sampler_epoch(r: Recogniser, call: ast.Call) -> None:
    """``dist-sampler-global-batch``: ``loader.sampler.set_epoch(epoch)``, a loader's
    sampler told the epoch (a ``DistributedSampler``'s shuffle per epoch: no other torch
    sampler has the method)."""
    func = call.func
    if (
        isinstance(func, ast.Attribute)
        and func.attr == "set_epoch"
        and isinstance(func.value, ast.Attribute)
        and func.value.attr in ("sampler", "batch_sampler")
        and id(call) not in r.reported
    ):
        r.add(
            call,
            "dist-sampler-global-batch",
            "keep it: a tj.DeviceLoader reads .sampler through to the DataLoader it wraps",
            position=r.file.method_position(func),
        )


def _made_by(r: Recogniser, name: ast.Name, made: Callable[[str], bool]) -> bool:
    """Every binding of ``name`` is a call (assigned, or a ``with`` item's) of a qualified
    name ``made`` accepts."""
    bindings = r.file.names.bindings(name)
    if not bindings:
        return False
    for binding in bindings:
        value = binding.value
        if binding.kind not in ("assign", "with") or binding.element is not None:
            return False
        if not isinstance(value, ast.Call):
            return False
        qualified = r.qualname(value.func)
        if qualified is None or not made(qualified):
            return False
    return True
