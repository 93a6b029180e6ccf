"""The idiom catalog: one row per PyTorch device idiom and its JAX translations.

This is the single source for the migration guide (``docs/migration-guide.md`` is
generated from :func:`to_markdown`), the side-by-side tests (every row is run in
PyTorch and through torch2jax_device, and a test fails if a row has no such test)
and the porting scanner.

A row whose :attr:`Idiom.runs` is true is executed as written by the side-by-side
suite: the ``torch`` snippet with ``torch`` in scope, the ``tj`` snippet with ``tj``,
``jax`` and ``jnp`` in scope, and the two outcomes (the value of :attr:`Idiom.result`,
or the exception raised) must agree. Rows that need set-up name their dedicated
tests instead. The ``jax`` column is what you would write with JAX alone.

Example:
    >>> from torch2jax_device import idioms
    >>> idioms.get("device-select").tj
    'device = tj.device("cuda" if tj.cuda.is_available() else "cpu")'
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Mapping, Sequence

__all__ = ["CATALOG", "SECTIONS", "Idiom", "get", "to_markdown"]


@dataclasses.dataclass(frozen=True)
class Idiom:
    """One PyTorch idiom with its plain-JAX and torch2jax_device equivalents.

    Attributes:
        id: Stable identifier, used by tests, the guide's anchors and scanner rules.
        section: The guide section the row belongs to (one of :data:`SECTIONS`).
        title: What the idiom does, in a few words.
        torch: The PyTorch code.
        jax: The same with JAX alone.
        tj: The same with torch2jax_device (imported as ``tj``).
        notes: Differences a porter must know.
        runs: The side-by-side suite executes ``torch`` and ``tj`` as written.
        result: The variable both snippets assign and the suite compares; ``None``
            compares only success versus the exception raised.
    """

    id: str
    section: str
    title: str
    torch: str
    jax: str
    tj: str
    notes: str = ""
    runs: bool = True
    result: str | None = None


SECTIONS: tuple[str, ...] = (
    "Devices",
    "Availability",
    "Default device",
    "Placement",
    "Memory and start-up",
    "Precision",
    "Checkpoints",
    "Feeding the device",
    "Distributed",
)

CATALOG: tuple[Idiom, ...] = (
    Idiom(
        id="device-select",
        section="Devices",
        title="Pick the GPU if there is one",
        torch='device = torch.device("cuda" if torch.cuda.is_available() else "cpu")',
        jax=(
            'platform = "cuda" if "cuda" in jax.extend.backend.backends() else "cpu"\n'
            "device = jax.local_devices(backend=platform)[0]"
        ),
        tj='device = tj.device("cuda" if tj.cuda.is_available() else "cpu")',
        notes=(
            "`jax.devices('cuda')` raises on a machine without a GPU; "
            "`tj.cuda.is_available()` never does."
        ),
        result="device",
    ),
    Idiom(
        id="device-indexed",
        section="Devices",
        title="Name one device by string",
        torch='device = torch.device("cuda:1")',
        jax='device = jax.local_devices(backend="cuda")[1]',
        tj='device = tj.device("cuda:1")',
        notes=(
            "Parsed lazily, with torch's grammar and errors. The index counts this "
            "process's devices of the platform, as a CUDA ordinal does; JAX's "
            "`Device.id` is global and is not used."
        ),
        result="device",
    ),
    Idiom(
        id="device-type-index",
        section="Devices",
        title="Name one device by type and index",
        torch='device = torch.device("cuda", 1)',
        jax='device = jax.local_devices(backend="cuda")[1]',
        tj='device = tj.device("cuda", 1)',
        result="device",
    ),
    Idiom(
        id="device-accelerator-index",
        section="Devices",
        title="An int means an index of the current accelerator",
        torch="device = torch.device(0)",
        jax="device = jax.local_devices()[0]  # the default backend, CPU included",
        tj="device = tj.device(0)",
        notes="Raises when there is no accelerator, as torch does.",
        result="device",
    ),
    Idiom(
        id="device-parse-error",
        section="Devices",
        title="Malformed device strings raise",
        torch='device = torch.device("cuda:01")',
        jax="# JAX never parses 'type:index' strings",
        tj='device = tj.device("cuda:01")',
        notes="`tj.InvalidDeviceError` is a `RuntimeError`, like torch's error.",
        result="device",
    ),
    Idiom(
        id="device-jax-device",
        section="Devices",
        title="Resolve to the concrete JAX device",
        torch='tensor = torch.zeros(3, device="cpu")',
        jax='tensor = jnp.zeros(3, device=jax.local_devices(backend="cpu")[0])',
        tj='tensor = jnp.zeros(3, device=tj.device("cpu").jax_device)',
        notes=(
            "`tj.resolve(spec)` and `Device.jax_device` raise `tj.DeviceUnavailableError` "
            "naming the devices that exist when the device is missing."
        ),
        result="tensor",
    ),
    Idiom(
        id="cuda-is-available",
        section="Availability",
        title="Is there a CUDA GPU?",
        torch="available = torch.cuda.is_available()",
        jax='available = "cuda" in jax.extend.backend.backends()',
        tj="available = tj.cuda.is_available()",
        notes="Starts JAX's backends on first call (JAX's rule).",
        result="available",
    ),
    Idiom(
        id="cuda-device-count",
        section="Availability",
        title="How many CUDA GPUs?",
        torch="count = torch.cuda.device_count()",
        jax=(
            "backends = jax.extend.backend.backends()\n"
            'count = len(jax.local_devices(backend="cuda")) if "cuda" in backends else 0'
        ),
        tj="count = tj.cuda.device_count()",
        result="count",
    ),
    Idiom(
        id="cuda-current-device",
        section="Availability",
        title="Index of the current CUDA device",
        torch="index = torch.cuda.current_device()",
        jax="# no equivalent: JAX has no current device",
        tj="index = tj.cuda.current_device()",
        result="index",
    ),
    Idiom(
        id="cuda-set-device",
        section="Availability",
        title="Change the current CUDA device",
        torch="torch.cuda.set_device(1)",
        jax="# no equivalent: pass jax.local_devices(backend='cuda')[1] explicitly",
        tj="tj.cuda.set_device(1)",
        notes=(
            "Per thread, like CUDA's current device. An unindexed `tj.device('cuda')` "
            "resolves to it."
        ),
        runs=False,
    ),
    Idiom(
        id="cuda-device-context",
        section="Availability",
        title="Current CUDA device for a block",
        torch="with torch.cuda.device(1):\n    ...",
        jax="# no equivalent",
        tj="with tj.cuda.device(1):\n    ...",
        runs=False,
    ),
    Idiom(
        id="cuda-device-name",
        section="Availability",
        title="GPU name",
        torch="name = torch.cuda.get_device_name(0)",
        jax='name = jax.local_devices(backend="cuda")[0].device_kind',
        tj="name = tj.cuda.get_device_name(0)",
        result="name",
    ),
    Idiom(
        id="cuda-device-properties",
        section="Availability",
        title="GPU properties",
        torch="props = torch.cuda.get_device_properties(0)",
        jax=(
            'gpu = jax.local_devices(backend="cuda")[0]\n'
            "sms, stats = gpu.core_count, gpu.memory_stats()"
        ),
        tj="props = tj.cuda.get_device_properties(0)",
        notes=(
            "`total_memory` is what JAX's allocator may use (`bytes_limit`: 75 % of the "
            "card with default preallocation), not the physical total."
        ),
        runs=False,
    ),
    Idiom(
        id="cuda-device-capability",
        section="Availability",
        title="Compute capability",
        torch="capability = torch.cuda.get_device_capability()",
        jax='capability = jax.local_devices(backend="cuda")[0].compute_capability  # "9.0"',
        tj="capability = tj.cuda.get_device_capability()",
        result="capability",
    ),
    Idiom(
        id="cuda-bf16",
        section="Availability",
        title="bfloat16 support",
        torch="bf16 = torch.cuda.is_bf16_supported()",
        jax="# XLA runs bfloat16 on every GPU (emulated before compute capability 8.0)",
        tj="bf16 = tj.cuda.is_bf16_supported()",
        result="bf16",
    ),
    Idiom(
        id="cuda-synchronize",
        section="Availability",
        title="Wait for the GPU",
        torch="torch.cuda.synchronize()",
        jax="jax.block_until_ready(outputs)",
        tj="tj.cuda.synchronize()",
        notes=(
            "JAX has no device-wide barrier: this waits for every live array on the "
            "device and for JAX effects."
        ),
    ),
    Idiom(
        id="cuda-is-built",
        section="Availability",
        title="Was CUDA support installed?",
        torch="built = torch.backends.cuda.is_built()",
        jax="# look for the jax-cuda12-plugin / jax-cuda13-plugin distribution",
        tj="built = tj.backends.cuda.is_built()",
        notes="Never starts JAX.",
        result="built",
    ),
    Idiom(
        id="mps-is-available",
        section="Availability",
        title="Is there an Apple GPU?",
        torch="available = torch.backends.mps.is_available()",
        jax='available = "METAL" in jax.extend.backend.backends()',
        tj="available = tj.backends.mps.is_available()",
        notes="Served by the jax-metal plugin.",
        result="available",
    ),
    Idiom(
        id="accelerator-current",
        section="Availability",
        title="Which accelerator is there?",
        torch="accelerator = torch.accelerator.current_accelerator()",
        jax='accelerator = jax.default_backend() if jax.default_backend() != "cpu" else None',
        tj="accelerator = tj.accelerator.current_accelerator()",
        notes="`None` without an accelerator; `jax.default_backend()` says `'gpu'`, not `'cuda'`.",
        result="accelerator",
    ),
    Idiom(
        id="accelerator-is-available",
        section="Availability",
        title="Is there any accelerator?",
        torch="available = torch.accelerator.is_available()",
        jax='available = jax.default_backend() != "cpu"',
        tj="available = tj.accelerator.is_available()",
        result="available",
    ),
    Idiom(
        id="accelerator-device-count",
        section="Availability",
        title="How many accelerator devices?",
        torch="count = torch.accelerator.device_count()",
        jax='count = jax.local_device_count() if jax.default_backend() != "cpu" else 0',
        tj="count = tj.accelerator.device_count()",
        result="count",
    ),
    Idiom(
        id="accelerator-current-index",
        section="Availability",
        title="Current accelerator index",
        torch="index = torch.accelerator.current_device_index()",
        jax="# no equivalent: JAX has no current device",
        tj="index = tj.accelerator.current_device_index()",
        result="index",
    ),
    Idiom(
        id="list-devices",
        section="Availability",
        title="Every device on every backend",
        torch='devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]',
        jax="devices = jnp.__array_namespace_info__().devices()[1:]  # [0] is None",
        tj='devices = tj.list_devices("cuda")',
        notes=(
            "`jax.devices()` lists the default backend only; `tj.list_devices()` lists "
            "every backend and `tj.available_backends()` names them."
        ),
        result="devices",
    ),
    Idiom(
        id="default-device-context",
        section="Default device",
        title="Create new arrays on a device for a block",
        torch='with torch.device("cpu"):\n    x = torch.zeros(3)',
        jax='with jax.default_device(jax.local_devices(backend="cpu")[0]):\n    x = jnp.zeros(3)',
        tj='with tj.device("cpu"):\n    x = jnp.zeros(3)',
        notes=(
            "Checked when entered (torch checks at the first tensor). Per thread. "
            "Places uncommitted data only: arrays already committed to a device stay there."
        ),
        result="x",
    ),
    Idiom(
        id="default-device-missing",
        section="Default device",
        title="A missing device fails",
        torch='with torch.device("cuda"):\n    x = torch.zeros(3)',
        jax='with jax.default_device("gpu"):\n    x = jnp.zeros(3)',
        tj='with tj.device("cuda"):\n    x = jnp.zeros(3)',
        notes="`jax.default_device('cuda')` is rejected; `'gpu'` fails only at the first array.",
        result="x",
    ),
    Idiom(
        id="default-device-set",
        section="Default device",
        title="Set the default device",
        torch='torch.set_default_device("cpu")\nx = torch.ones(2)',
        jax=(
            'jax.config.update("jax_default_device", jax.local_devices(backend="cpu")[0])\n'
            "x = jnp.ones(2)"
        ),
        tj='tj.set_default_device("cpu")\nx = jnp.ones(2)',
        notes=(
            "Per thread, as in torch 2.13 (`jax.config.update` is process-wide). "
            "`set_default_device(None)` restores JAX's own default."
        ),
        result="x",
    ),
    Idiom(
        id="default-device-get",
        section="Default device",
        title="Read the default device",
        torch="device = torch.get_default_device()",
        jax="device = jax.extend.backend.get_default_device()",
        tj="device = tj.get_default_device()",
        notes=(
            "With nothing set, JAX's default is the accelerator when there is one; "
            "torch's is the CPU."
        ),
        runs=False,
    ),
    Idiom(
        id="tensor-to-device",
        section="Placement",
        title="Move a tensor to a device",
        torch="x = x.to(device)",
        jax="x = jax.device_put(x, device)  # device must be a jax.Device",
        tj="x = tj.to_device(x, device)",
        notes=(
            "Committed to the device, so jitted code runs there. Returns the same object "
            "when nothing changes (`x.to(x.device) is x`). Takes torch tensors and NumPy "
            "arrays too; `jax.device_put` rejects strings and torch tensors."
        ),
        runs=False,
    ),
    Idiom(
        id="tensor-to-dtype",
        section="Placement",
        title="Cast",
        torch="x = x.to(torch.float16)",
        jax="x = x.astype(jnp.float16)",
        tj="x = tj.to_device(x, jnp.float16)",
        notes="Stays on its device. Accepts JAX/NumPy dtypes, names and torch dtypes.",
        runs=False,
    ),
    Idiom(
        id="tensor-to-device-dtype",
        section="Placement",
        title="Move and cast in one call",
        torch="x = x.to(device, torch.float16)",
        jax="x = jax.device_put(x.astype(jnp.float16), device)",
        tj="x = tj.to_device(x, device, jnp.float16)",
        runs=False,
    ),
    Idiom(
        id="tensor-to-other",
        section="Placement",
        title="Match another tensor's device and dtype",
        torch="x = x.to(other)",
        jax="x = jax.device_put(x.astype(other.dtype), other.device)",
        tj="x = tj.to_device(x, other)",
        runs=False,
    ),
    Idiom(
        id="tensor-to-copy",
        section="Placement",
        title="Always copy",
        torch="y = x.to(device, copy=True)",
        jax="y = jax.device_put(x, device, may_alias=False)",
        tj="y = tj.to_device(x, device, copy=True)",
        runs=False,
    ),
    Idiom(
        id="tensor-non-blocking",
        section="Placement",
        title="Asynchronous transfer",
        torch="x = x.to(device, non_blocking=True)",
        jax="x = jax.device_put(x, device)  # always asynchronous",
        tj="x = tj.to_device(x, device, non_blocking=True)",
        notes="`non_blocking=False` (the default) returns once the data is on the device.",
        runs=False,
    ),
    Idiom(
        id="tensor-cuda",
        section="Placement",
        title="`.cuda()`",
        torch="x = x.cuda()",
        jax='x = jax.device_put(x, jax.local_devices(backend="cuda")[0])',
        tj='x = tj.to_device(x, "cuda")',
        runs=False,
    ),
    Idiom(
        id="tensor-cpu",
        section="Placement",
        title="`.cpu()`",
        torch="x = x.cpu()",
        jax='x = jax.device_put(x, jax.local_devices(backend="cpu")[0])',
        tj='x = tj.to_device(x, "cpu")',
        notes="For a NumPy array use `np.asarray(x)` (zero-copy from a CPU array).",
        runs=False,
    ),
    Idiom(
        id="batch-to-device",
        section="Placement",
        title="Move a whole batch (dict, list, dataclass, ...)",
        torch="batch = {k: v.to(device) for k, v in batch.items()}",
        jax="batch = jax.device_put(batch, device)",
        tj="batch = tj.to_device(batch, device)",
        notes=(
            "One batched transfer. Containers keep their types (`defaultdict` with its "
            "factory, namedtuples, dataclasses); strings and Python numbers pass through, "
            "where `jax.device_put` turns every number into an array."
        ),
        runs=False,
    ),
    Idiom(
        id="tensor-device",
        section="Placement",
        title="Which device is it on?",
        torch="device = x.device",
        jax="device = x.device  # a Sharding if sharded; AttributeError under jit",
        tj="device = tj.device_of(x)",
        notes="`None` under `jax.jit` (tracers have no device). Works on trees and modules.",
        runs=False,
    ),
    Idiom(
        id="module-to",
        section="Placement",
        title="Move a model",
        torch="model = model.to(device)",
        jax="nnx.update(model, jax.device_put(nnx.state(model), device))",
        tj="model = tj.to_device(model, device)",
        notes=(
            "Flax NNX modules move in place and the same module is returned; "
            "`jax.device_put(model, d)` returns a new module. Linen variables move as trees."
        ),
        runs=False,
    ),
    Idiom(
        id="module-to-dtype",
        section="Placement",
        title="Cast a model",
        torch="model = model.to(torch.bfloat16)",
        jax="# jax.tree.map over the floating-point leaves of nnx.state(model), then nnx.update",
        tj="model = tj.to_device(model, jnp.bfloat16)",
        notes="Casts floating-point and complex state only, as `Module.to` does.",
        runs=False,
    ),
    Idiom(
        id="parameters-device",
        section="Placement",
        title="Device of a model",
        torch="device = next(model.parameters()).device",
        jax="device = jax.tree.leaves(nnx.state(model, nnx.Param))[0].device",
        tj="device = next(tj.parameters(model)).device",
        notes="`tj.device_of(model)` also checks that all parameters agree.",
        runs=False,
    ),
    Idiom(
        id="mixed-device-error",
        section="Placement",
        title="Tensors on two devices",
        torch="z = x + y  # RuntimeError: Expected all tensors to be on the same device",
        jax="z = x + y  # ValueError: Received incompatible devices for jitted computation",
        tj="tj.check_same_device(x, y)  # MixedDeviceError naming every device and leaf",
        notes="JAX only complains about committed arrays; uncommitted ones move silently.",
        runs=False,
    ),
    Idiom(
        id="from-numpy",
        section="Placement",
        title="Share a NumPy array",
        torch="t = torch.from_numpy(a)",
        jax='x = jax.device_put(a, jax.local_devices(backend="cpu")[0])',
        tj="x = tj.to_jax(a)",
        notes=(
            "Shares memory only if the buffer is 64-byte aligned (JAX's CPU rule); "
            "otherwise copies, or raises with `strict=True`."
        ),
        runs=False,
    ),
    Idiom(
        id="tensor-to-jax",
        section="Placement",
        title="Hand a torch tensor to JAX",
        torch="a = t.numpy()",
        jax="x = jax.dlpack.from_dlpack(t.detach())",
        tj="x = tj.to_jax(t)",
        notes="Zero-copy through DLPack where possible; int64 becomes int32 without x64 (warned).",
        runs=False,
    ),
    Idiom(
        id="jax-to-tensor",
        section="Placement",
        title="Hand a JAX array to torch",
        torch="t = torch.from_numpy(a)",
        jax="t = torch.from_dlpack(x)",
        tj="t = tj.to_torch(x)",
        runs=False,
    ),
    Idiom(
        id="lazy-gpu-memory",
        section="Memory and start-up",
        title="Allocate GPU memory as needed",
        torch="# PyTorch's default: memory is taken as tensors need it",
        jax='os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"  # before JAX starts',
        tj="tj.configure(preallocate=False)",
        notes=(
            "JAX takes 75 % of the card at the first operation unless told otherwise. "
            "`configure` raises `AlreadyInitializedError` once JAX has started, where a late "
            "environment variable is silently ignored."
        ),
        runs=False,
    ),
    Idiom(
        id="memory-fraction",
        section="Memory and start-up",
        title="Cap the GPU memory used",
        torch="torch.cuda.set_per_process_memory_fraction(0.5)",
        jax='os.environ["XLA_CLIENT_MEM_FRACTION"] = "0.5"  # before JAX starts',
        tj="tj.cuda.set_per_process_memory_fraction(0.5)",
        notes="Same as `tj.configure(memory_fraction=0.5)`: before JAX starts, all GPUs.",
        runs=False,
    ),
    Idiom(
        id="select-platforms",
        section="Memory and start-up",
        title="Keep JAX off the GPU",
        torch='os.environ["CUDA_VISIBLE_DEVICES"] = ""',
        jax='jax.config.update("jax_platforms", "cpu")  # before JAX starts, else ignored',
        tj='tj.configure(platforms="cpu")',
        notes="Write `cuda,cpu`, never `gpu` (JAX then also requires ROCm and oneAPI).",
        runs=False,
    ),
    Idiom(
        id="cuda-memory-allocated",
        section="Memory and start-up",
        title="Bytes in use",
        torch="allocated = torch.cuda.memory_allocated()",
        jax='allocated = jax.local_devices(backend="cuda")[0].memory_stats()["bytes_in_use"]',
        tj="allocated = tj.cuda.memory_allocated()",
        result="allocated",
    ),
    Idiom(
        id="cuda-max-memory-allocated",
        section="Memory and start-up",
        title="Peak bytes in use",
        torch="peak = torch.cuda.max_memory_allocated()",
        jax='peak = jax.local_devices(backend="cuda")[0].memory_stats()["peak_bytes_in_use"]',
        tj="peak = tj.cuda.max_memory_allocated()",
        result="peak",
    ),
    Idiom(
        id="cuda-memory-reserved",
        section="Memory and start-up",
        title="Bytes held by the allocator",
        torch="reserved = torch.cuda.memory_reserved()",
        jax='reserved = jax.local_devices(backend="cuda")[0].memory_stats()["pool_bytes"]',
        tj="reserved = tj.cuda.memory_reserved()",
        notes="With preallocation, the whole preallocated pool.",
        result="reserved",
    ),
    Idiom(
        id="cuda-max-memory-reserved",
        section="Memory and start-up",
        title="Peak bytes held by the allocator",
        torch="peak = torch.cuda.max_memory_reserved()",
        jax='peak = jax.local_devices(backend="cuda")[0].memory_stats()["peak_pool_bytes"]',
        tj="peak = tj.cuda.max_memory_reserved()",
        result="peak",
    ),
    Idiom(
        id="cuda-memory-stats",
        section="Memory and start-up",
        title="All allocator statistics",
        torch="stats = torch.cuda.memory_stats()",
        jax='stats = jax.local_devices(backend="cuda")[0].memory_stats()',
        tj="stats = tj.cuda.memory_stats()",
        notes="torch's key names for what JAX reports, then JAX's own as `jax.<key>`.",
        result="stats",
    ),
    Idiom(
        id="cuda-mem-get-info",
        section="Memory and start-up",
        title="Free and total GPU memory",
        torch="free, total = torch.cuda.mem_get_info()",
        jax=(
            'stats = jax.local_devices(backend="cuda")[0].memory_stats()\n'
            'free = stats["bytes_limit"] - stats["bytes_in_use"]'
        ),
        tj="free, total = tj.cuda.mem_get_info()",
        notes="Relative to JAX's pool (`bytes_limit`), not the whole card.",
        result="free",
    ),
    Idiom(
        id="cuda-memory-summary",
        section="Memory and start-up",
        title="Readable memory report",
        torch="print(torch.cuda.memory_summary())",
        jax='print(jax.local_devices(backend="cuda")[0].memory_stats())',
        tj="print(tj.cuda.memory_summary())",
        runs=False,
    ),
    Idiom(
        id="cuda-reset-peak",
        section="Memory and start-up",
        title="Reset the peak counters",
        torch="torch.cuda.reset_peak_memory_stats()",
        jax="# impossible: peak_bytes_in_use lasts for the process",
        tj="before = tj.cuda.memory_allocated()  # or: with tj.track_arrays(device): ...",
        notes="`tj.cuda.reset_peak_memory_stats()` raises `UnsupportedOperationError` saying so.",
        runs=False,
    ),
    Idiom(
        id="cuda-empty-cache",
        section="Memory and start-up",
        title="Release cached memory",
        torch="torch.cuda.empty_cache()",
        jax="gc.collect(); jax.clear_caches()",
        tj="tj.cuda.empty_cache()",
        notes=(
            "Drops unreachable arrays and compiled programs; the BFC pool stays reserved. "
            "Only `tj.configure(allocator='platform')` returns memory to the driver."
        ),
    ),
    Idiom(
        id="live-arrays",
        section="Memory and start-up",
        title="What is still alive (leak hunting)",
        torch="tensors = [o for o in gc.get_objects() if torch.is_tensor(o)]",
        jax="arrays = jax.live_arrays()  # default backend only",
        tj="arrays = tj.live_arrays()  # or: with tj.track_arrays(device) as report: ...",
        notes="`tj.track_arrays` reports what a block left alive on a device, with bytes.",
        runs=False,
    ),
    Idiom(
        id="autocast",
        section="Precision",
        title="Mixed precision on a device",
        torch=('with torch.autocast(device_type="cuda", dtype=torch.bfloat16):\n    y = model(x)'),
        jax="y = model(x.astype(jnp.bfloat16))  # with params cast, or Flax dtype=",
        tj=(
            "model = tj.to_device(model, jnp.bfloat16)  # floating state only\n"
            "y = model(tj.to_device(x, jnp.bfloat16))"
        ),
        notes=(
            "JAX has no autocast: computation runs in the dtype of its inputs. Cast "
            "parameters and inputs (or give Flax layers `dtype=jnp.bfloat16`, which keeps "
            "float32 parameters and computes in bfloat16)."
        ),
        runs=False,
    ),
    Idiom(
        id="load-safetensors",
        section="Checkpoints",
        title="Load a safetensors file onto a device",
        torch='tensors = safetensors.torch.load_file(path, device="cpu")',
        jax=(
            "tensors = safetensors.flax.load_file(path)  # no device=: JAX's default device\n"
            "import ml_dtypes  # before a bf16 load through NumPy\n"
            "cpu = jax.local_devices(backend='cpu')[0]\n"
            "tensors = jax.device_put(safetensors.numpy.load_file(path), cpu)  # 2 copies"
        ),
        tj='tensors = tj.load_file(path, device="cpu")',
        notes=(
            "The CPU unless told otherwise, as in `safetensors.torch`; `device=` takes what "
            "`tj.device` takes. The bytes are read once into 64-byte-aligned host memory that "
            "the CPU arrays use in place (RAM about the file size; `safetensors.flax` needs "
            "3x, `safetensors.numpy` 2x). Every dtype, BF16 and FP8 included, without "
            "import-order tricks; the packed F4/F6 kinds are refused."
        ),
        runs=False,
    ),
    Idiom(
        id="load-safetensors-default-device",
        section="Checkpoints",
        title="The default device does not move a load",
        torch='with torch.device("cuda"):\n    tensors = safetensors.torch.load_file(path)  # CPU',
        jax="with jax.default_device(gpu):\n    tensors = safetensors.flax.load_file(path)  # GPU",
        tj='with tj.device("cuda"):\n    tensors = tj.load_file(path)  # CPU',
        notes=(
            "`safetensors.flax` creates every array on the default device, so a file that "
            "fits in RAM but not on the GPU fails with `RESOURCE_EXHAUSTED`."
        ),
        runs=False,
    ),
    Idiom(
        id="safe-open-slice",
        section="Checkpoints",
        title="Read part of a tensor lazily",
        torch=(
            'with safetensors.safe_open(path, framework="pt") as f:\n'
            '    window = f.get_slice("tokens")[start:start + n]'
        ),
        jax=(
            'with safetensors.safe_open(path, framework="flax") as f:\n'
            '    window = f.get_slice("tokens")[start:start + n]  # default device'
        ),
        tj='with tj.safe_open(path) as f:\n    window = f.get_slice("tokens")[start:start + n]',
        notes=(
            "No `framework` argument: results are JAX arrays on `device=` (the CPU by "
            "default). Reads only the bytes the index selects. Basic indices only (ints, "
            "slices, `...`, `None`; negative steps work); safetensors reads the whole "
            "tensor for list or tensor indices."
        ),
        runs=False,
    ),
    Idiom(
        id="save-safetensors",
        section="Checkpoints",
        title="Save arrays to a safetensors file",
        torch="safetensors.torch.save_file(tensors, path, metadata)",
        jax="safetensors.flax.save_file(tensors, path, metadata)",
        tj="tj.save_file(tensors, path, metadata)",
        notes=(
            "JAX, NumPy and torch values, mixed. Atomic: a temporary file, flushed, then "
            "renamed. Writes the bytes `safetensors.torch` writes; tensors sharing memory "
            "are written in full (`safetensors.torch` refuses them)."
        ),
        runs=False,
    ),
    Idiom(
        id="torch-load",
        section="Checkpoints",
        title="Load a PyTorch checkpoint",
        torch="checkpoint = torch.load(path)",
        jax="# torch.load(path), then jax.dlpack.from_dlpack(t) for every tensor in it",
        tj="checkpoint = tj.load(path)",
        notes=(
            "Always `weights_only=True`: nothing in the file runs. Tensors become JAX arrays "
            "without copies where the memory allows; other entries are kept. Without "
            "`map_location` tensors go where they were saved: a `cuda:0` checkpoint on a "
            "machine without that GPU raises `tj.DeviceUnavailableError` (a `RuntimeError`, "
            "like torch's error). `.safetensors` files load too."
        ),
        runs=False,
    ),
    Idiom(
        id="torch-load-map-location",
        section="Checkpoints",
        title="Load a checkpoint onto a device",
        torch='checkpoint = torch.load(path, map_location="cpu")',
        jax="# torch.load(path, map_location='cpu'), then jax.device_put per tensor",
        tj='checkpoint = tj.load(path, map_location="cpu")',
        notes=(
            "Also a `torch.device`, `tj.device` or `jax.Device`. torch fails on "
            "`torch.device('cpu', 0)` (it has no restorer for 'cpu:0'); tj places on cpu:0."
        ),
        runs=False,
    ),
    Idiom(
        id="torch-load-map-location-dict",
        section="Checkpoints",
        title="Remap saved locations",
        torch='checkpoint = torch.load(path, map_location={"cuda:0": "cpu"})',
        jax="# no equivalent",
        tj='checkpoint = tj.load(path, map_location={"cuda:0": "cpu"})',
        notes=(
            "Saved locations the dict does not list stay where they were saved. A "
            "safetensors file counts as saved on `cpu`."
        ),
        runs=False,
    ),
    Idiom(
        id="torch-load-map-location-callable",
        section="Checkpoints",
        title="Decide per storage",
        torch="checkpoint = torch.load(path, map_location=lambda storage, loc: storage)",
        jax="# no equivalent",
        tj="checkpoint = tj.load(path, map_location=lambda storage, loc: storage)",
        notes=(
            "Called as torch calls it, with each CPU storage and its saved location; the "
            "tensor goes where the returned storage is, or to its saved location for "
            "`None`. PyTorch checkpoints only."
        ),
        runs=False,
    ),
    Idiom(
        id="dataloader-to-device",
        section="Feeding the device",
        title="Loop over a DataLoader, moving each batch to the device",
        torch=(
            "for x, y in loader:\n"
            "    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)"
        ),
        jax="for x, y in loader:\n    x, y = jax.device_put((x.numpy(), y.numpy()), device)",
        tj="for x, y in tj.DeviceLoader(loader, device):\n    ...",
        notes=(
            "Batches arrive as JAX arrays committed to the device, transferred by a "
            "background thread up to `prefetch` (2) batches ahead of the loop. `len()` is "
            "the loader's; each `for` is a new epoch over `iter(loader)`. The wrapped loader "
            "is `.loader` (`.loader.dataset`, `.loader.sampler.set_epoch(epoch)`)."
        ),
        runs=False,
    ),
    Idiom(
        id="dataloader-pin-memory",
        section="Feeding the device",
        title="Pinned host memory for faster, asynchronous copies",
        torch=(
            "loader = DataLoader(dataset, batch_size=64, pin_memory=True)\n"
            "for x, y in loader:\n"
            "    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)"
        ),
        jax=(
            'pinned = jax.sharding.SingleDeviceSharding(device, memory_kind="pinned_host")\n'
            "on_device = jax.sharding.SingleDeviceSharding(device)\n"
            "for x, y in DataLoader(dataset, batch_size=64):\n"
            "    x, y = jax.device_put(jax.device_put((x.numpy(), y.numpy()), pinned), on_device)"
        ),
        tj=(
            "loader = DataLoader(dataset, batch_size=64)\n"
            "for x, y in tj.DeviceLoader(loader, device, pin_memory=True):\n"
            "    ..."
        ),
        notes=(
            "Each batch is staged in the device's `pinned_host` memory, then moved. Where a "
            "backend has no pinned host memory, batches go straight to the device. JAX's CPU "
            "backend has pinned host memory (ordinary RAM), so on a CPU-only machine staging "
            "is one more host copy; a CPU-only torch warns and skips pinning."
        ),
        runs=False,
    ),
    Idiom(
        id="prefetch-to-device",
        section="Feeding the device",
        title="Move batches from any iterable ahead of the step",
        torch="for batch in batches:\n    batch = batch.to(device, non_blocking=True)",
        jax=(
            "# flax.jax_utils.prefetch_to_device needs a leading device axis\n"
            "for batch in batches:\n"
            "    batch = jax.device_put(batch, device)"
        ),
        tj="for batch in tj.prefetch_to_device(batches, device):\n    ...",
        notes=(
            "Any iterable of trees (torch tensors, NumPy, JAX, nested). A background thread "
            "transfers up to `size` (2) batches ahead; order is kept, a source exception is "
            "raised where it happened, and closing or dropping the generator stops the "
            "thread and closes the source. `device` may be a `jax.sharding.Sharding`."
        ),
        runs=False,
    ),
    Idiom(
        id="tensor-pin-memory",
        section="Feeding the device",
        title="Copy a tensor into pinned host memory",
        torch="pinned = tensor.pin_memory()",
        jax="pinned = jax.device_put(array, jax.memory.Space.Host)",
        tj="pinned = tj.pin_memory(array)",
        notes=(
            "Arrays land in the `pinned_host` memory of the default device, committed there; "
            "pinned arrays come back as they are. Works on JAX's CPU backend, where a "
            "CPU-only torch raises. The array reports the device owning that memory "
            "(`cuda:0`), where torch says `cpu`. Without pinned host memory on the backend, "
            "the tree comes back unchanged."
        ),
        runs=False,
    ),
    Idiom(
        id="dataloader-workers",
        section="Feeding the device",
        title="Worker processes for loading",
        torch="loader = DataLoader(dataset, batch_size=64, num_workers=4)",
        jax=(
            "# keep JAX out of the workers, and never fork after JAX started (jax#9190)\n"
            "loader = DataLoader(dataset, batch_size=64, num_workers=4,\n"
            '                    multiprocessing_context="spawn")'
        ),
        tj=(
            "loader = tj.DeviceLoader(\n"
            "    DataLoader(dataset, batch_size=64, num_workers=4,\n"
            '               multiprocessing_context="spawn"),\n'
            "    device,\n"
            ")"
        ),
        notes=(
            "Workers return NumPy arrays or torch tensors; batches are placed in the main "
            "process. A DataLoader that would fork its workers after JAX started warns once "
            "(`tj.ForkAfterJaxWarning`) with this fix."
        ),
        runs=False,
    ),
    Idiom(
        id="dist-init-process-group",
        section="Distributed",
        title="Join a torchrun job",
        torch='dist.init_process_group(backend="nccl")',
        jax=(
            "port = int(os.environ['MASTER_PORT']) + 1  # torchrun's store holds MASTER_PORT\n"
            "jax.distributed.initialize(\n"
            "    f\"{os.environ['MASTER_ADDR']}:{port}\",\n"
            '    num_processes=int(os.environ["WORLD_SIZE"]),\n'
            '    process_id=int(os.environ["RANK"]),\n'
            '    local_device_ids=[int(os.environ["LOCAL_RANK"])],\n'
            ")"
        ),
        tj='tj.distributed.init_process_group(backend="nccl")',
        notes=(
            "Must run before anything starts JAX. Reads torchrun's variables or "
            "`tcp://HOST:PORT`; under torchrun the coordinator takes `MASTER_PORT + 1` "
            "(torchrun's store holds `MASTER_PORT`). Bad settings, a busy port and an "
            "absent coordinator raise `DistributedError` (a `ValueError` and "
            "`RuntimeError`); a rank that never arrives makes JAX terminate the others "
            "after `timeout`."
        ),
        runs=False,
    ),
    Idiom(
        id="dist-not-initialized",
        section="Distributed",
        title="Process-group calls before joining fail",
        torch="rank = dist.get_rank()  # ValueError: Default process group has not been ...",
        jax="rank = jax.process_index()  # 0: JAX has no notion of an uninitialized group",
        tj="rank = tj.distributed.get_rank()  # DistributedError, a ValueError",
        runs=False,
    ),
    Idiom(
        id="dist-local-rank",
        section="Distributed",
        title="This process's GPU",
        torch=(
            'local_rank = int(os.environ["LOCAL_RANK"])\n'
            "torch.cuda.set_device(local_rank)\n"
            'device = torch.device(f"cuda:{local_rank}")'
        ),
        jax='device = jax.local_devices(backend="cuda")[0]  # local_device_ids=[LOCAL_RANK]',
        tj='local_rank = tj.distributed.get_local_rank()\ndevice = tj.device(f"cuda:{local_rank}")',
        notes=(
            "With several processes per host each one owns GPU `LOCAL_RANK` "
            "(`local_device_ids`); GPU indices are CUDA ordinals, as in torch, so "
            "`cuda:{local_rank}` names it (and so does unindexed `tj.device('cuda')`). "
            "One process per host (`LOCAL_WORLD_SIZE=1`) owns every GPU of the host."
        ),
        runs=False,
    ),
    Idiom(
        id="dist-device-mesh",
        section="Distributed",
        title="A mesh over every process's devices",
        torch='mesh = init_device_mesh("cuda", (2, 4), mesh_dim_names=("dp", "tp"))',
        jax='mesh = jax.make_mesh((2, 4), ("dp", "tp"), devices=jax.devices("cuda"))',
        tj='mesh = tj.distributed.init_device_mesh("cuda", (2, 4), mesh_dim_names=("dp", "tp"))',
        notes=(
            "Returns a `jax.sharding.Mesh` of all devices of all processes: the shape "
            "multiplies to `jax.device_count()`, the world size only with one device "
            "per process. Initializes the process group under a launcher, as torch does."
        ),
        runs=False,
    ),
    Idiom(
        id="dist-sampler-global-batch",
        section="Distributed",
        title="Each rank's shard of the data",
        torch=(
            "sampler = DistributedSampler(dataset, shuffle=False)\n"
            "x = torch.stack([dataset[i] for i in sampler])"
        ),
        jax=(
            'sharding = NamedSharding(mesh, P("data"))\n'
            "x = jax.make_array_from_process_local_data(sharding, local_rows)"
        ),
        tj="x = tj.distributed.make_global_batch(local_rows, mesh)",
        notes=(
            "Each process loads its own rows (`indices[rank::world_size]`, as "
            "`DistributedSampler(shuffle=False)`); the result is one global array, "
            "rows in rank order, split over the mesh's first axis."
        ),
        runs=False,
    ),
    Idiom(
        id="dist-ddp-gradient",
        section="Distributed",
        title="Data-parallel training (DDP)",
        torch=(
            "model = DDP(model, device_ids=[local_rank])\n"
            "loss_fn(model(x), y).backward()  # gradients averaged across ranks"
        ),
        jax=(
            "params = jax.device_put(params, NamedSharding(mesh, P()))\n"
            "grads = jax.jit(jax.grad(loss_fn))(params, batch)  # batch sharded over mesh"
        ),
        tj=(
            "params = jax.device_put(params, NamedSharding(mesh, P()))\n"
            "batch = tj.distributed.make_global_batch(local_batch, mesh)\n"
            "grads = jax.jit(jax.grad(loss_fn))(params, batch)"
        ),
        notes=(
            "No wrapper: replicated parameters and a global batch make `jax.jit` "
            "insert the gradient all-reduce. Equal to DDP's average when every rank "
            "feeds the same number of rows. DDP's broadcast of rank 0's weights: the "
            "same seed everywhere, or `multihost_utils.broadcast_one_to_all`."
        ),
        runs=False,
    ),
    Idiom(
        id="dist-all-reduce",
        section="Distributed",
        title="Reduce a value over all ranks",
        torch="dist.all_reduce(t, op=dist.ReduceOp.SUM)  # in place",
        jax="# a jitted reduction over a (process, local device) mesh of per-process values",
        tj="t = tj.distributed.all_reduce(t, op=tj.distributed.ReduceOp.SUM)",
        notes=(
            "For host-side values (metrics): returns the result, as a `jax.Array` on "
            "the process's first device, instead of updating in place. `sum`, `max`, "
            "`min`, `product`, `mean`. Ranks meet at JAX's coordinator first, so a "
            "missing rank raises after the timeout instead of hanging."
        ),
        runs=False,
    ),
    Idiom(
        id="dist-all-reduce-mean",
        section="Distributed",
        title="Average a metric over ranks",
        torch="dist.all_reduce(loss, op=dist.ReduceOp.SUM)\nloss /= dist.get_world_size()",
        jax="# a jitted mean over a (process, local device) mesh of per-process values",
        tj='loss = tj.distributed.all_reduce(loss, op="mean")',
        notes='gloo has no `ReduceOp.AVG` in torch; `tj` has it (`ReduceOp.AVG` is `"mean"`).',
        runs=False,
    ),
    Idiom(
        id="dist-barrier",
        section="Distributed",
        title="Wait for every rank",
        torch="dist.barrier()",
        jax="# jax.experimental.multihost_utils.sync_global_devices(name) (a device collective)",
        tj="tj.distributed.barrier()",
        notes=(
            "Runs on JAX's coordination service with the group's timeout; a rank that "
            "does not come makes the others raise `DistributedError` naming it."
        ),
        runs=False,
    ),
    Idiom(
        id="dist-destroy",
        section="Distributed",
        title="Leave the job",
        torch="dist.destroy_process_group()",
        jax="jax.distributed.shutdown()",
        tj="tj.distributed.destroy_process_group()",
        notes=(
            "Waits until every process shuts down (up to the timeout). The process "
            "cannot join another job afterwards."
        ),
        runs=False,
    ),
    Idiom(
        id="dist-launch",
        section="Distributed",
        title="Launch one process per GPU",
        torch="# torchrun --nproc_per_node=8 train.py",
        jax="# start each process yourself with its coordinator, process id and count",
        tj=(
            "# torchrun --nproc_per_node=8 train.py\n"
            "# torch2jax-device run --nproc-per-node 8 train.py"
        ),
        notes=(
            "The script runs unchanged under torchrun; `torch2jax-device run` sets the "
            "same variables without torch, stops the others when one fails and returns "
            "its exit code. Multi-host: same flags as torchrun (`--nnodes`, "
            "`--node-rank`, `--master-addr`, `--master-port`)."
        ),
        runs=False,
    ),
)


def get(idiom_id: str) -> Idiom:
    """The catalog row with this id.

    Raises:
        KeyError: no row has this id.
    """
    for idiom in CATALOG:
        if idiom.id == idiom_id:
            return idiom
    raise KeyError(f"no idiom {idiom_id!r} in the catalog")


def _code_cell(code: str) -> str:
    lines = [html.escape(line).replace("|", "&#124;") for line in code.splitlines()]
    return "<code>" + "<br>".join(line.replace("    ", "&nbsp;" * 4) for line in lines) + "</code>"


def to_markdown(proofs: Mapping[str, Sequence[str]] | None = None) -> str:
    """The migration guide's idiom tables, one per section, as Markdown.

    Args:
        proofs: For each idiom id, the test files (paths from the repository root) that
            prove it side by side; they are linked from the guide's last column.

    Example:
        >>> from torch2jax_device import idioms
        >>> idioms.to_markdown().splitlines()[0]
        '### Devices'
    """
    parts = []
    header = "| Idiom | PyTorch | plain JAX | torch2jax_device | Notes |"
    if proofs is not None:
        header += " Proven by |"
    for section in SECTIONS:
        parts.append(f"### {section}\n")
        parts.append(header)
        parts.append("|---" * header.count(" |") + "|")
        for idiom in CATALOG:
            if idiom.section != section:
                continue
            notes = idiom.notes.replace("|", "&#124;")
            row = (
                f'| <a id="{idiom.id}"></a>{idiom.title} | {_code_cell(idiom.torch)} | '
                f"{_code_cell(idiom.jax)} | {_code_cell(idiom.tj)} | {notes} |"
            )
            if proofs is not None:
                links = ", ".join(
                    f"[{path.rsplit('/', 1)[-1]}](../{path})" for path in proofs.get(idiom.id, ())
                )
                row += f" {links} |"
            parts.append(row)
        parts.append("")
    return "\n".join(parts)
