"""Catalog rows, section "Feeding the device": DataLoader, pin_memory and non_blocking: feeding the
device."""

from __future__ import annotations

from ..idiom import Idiom

SECTION = "Feeding the device"

ROWS: tuple[Idiom, ...] = (
    Idiom(
        id="dataloader-to-device",
        section=SECTION,
        title="Loop over a DataLoader, moving each batch to the device",
        torch=(
            "for x, y in loader:\n"
            "    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)"
        ),
        jax="for x, y in loader:\n    x, y = jax.device_put((x.numpy(), y.numpy()), device)",
        tj="for x, y in tj.DeviceLoader(loader, device):\n    ...",
        notes=(
            "Batches arrive as JAX arrays committed to the device, transferred up to "
            "`prefetch` (2) batches ahead of the loop; a slow loader runs in a background "
            "thread (`background=`). Dict batches keep their key order (`x, y = "
            "batch.values()`), where `jax.device_put` sorts the keys. `len()` is "
            "the loader's; each `for` is a new epoch over `iter(loader)`. The wrapped loader "
            "is `.loader` (`.loader.dataset`, `.loader.sampler.set_epoch(epoch)`). An epoch "
            "left unfinished (`break`, an exception, the end of the script) stops its "
            "thread quietly."
        ),
        runs=False,
    ),
    Idiom(
        id="dataloader-pin-memory",
        section=SECTION,
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
        torch_api=("torch.utils.data.DataLoader",),
        rewrite="custom",
    ),
    Idiom(
        id="prefetch-to-device",
        section=SECTION,
        title="Move batches from any iterable ahead of the step",
        torch="for batch in batches:\n    batch = batch.to(device, non_blocking=True)",
        jax=(
            "# flax.jax_utils.prefetch_to_device needs a leading device axis\n"
            "for batch in batches:\n"
            "    batch = jax.device_put(batch, device)"
        ),
        tj="for batch in tj.prefetch_to_device(batches, device):\n    ...",
        notes=(
            "Any iterable of trees (torch tensors, NumPy, JAX, nested). Up to `size` (2) "
            "batches are transferred ahead, and a slow source moves to a background thread "
            "(`background=`); order is kept, a source exception is raised where it happened, "
            "and closing or dropping the generator stops the thread and closes the source. "
            "`device` may be a `jax.sharding.Sharding`; a bare `int` is refused (Flax's "
            "`prefetch_to_device(it, 2)` means `size=2`)."
        ),
        runs=False,
    ),
    Idiom(
        id="tensor-pin-memory",
        section=SECTION,
        title="Copy a tensor into pinned host memory",
        torch="pinned = tensor.pin_memory()",
        jax="pinned = jax.device_put(tensor.numpy(), jax.memory.Space.Host)",
        tj="pinned = tj.pin_memory(tensor)",
        notes=(
            "Arrays land in the `pinned_host` memory of the default device, committed there; "
            "pinned arrays come back as they are. Works on JAX's CPU backend, where a "
            "CPU-only torch raises. The array reports the device owning that memory "
            "(`cuda:0`), where torch says `cpu`. Without pinned host memory on the backend, "
            "the tree comes back unchanged. A pinned array is for sending: torch computes "
            "on pinned tensors as on any CPU tensor, JAX refuses to mix them with other "
            'arrays ("memory_space of all inputs ... must be the same"), so compute on '
            "`tj.to_device(pinned, device)`."
        ),
        runs=False,
        torch_api=("Tensor.pin_memory",),
        tj_api=("tj.pin_memory",),
        rewrite="custom",
    ),
    Idiom(
        id="dataloader-workers",
        section=SECTION,
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
            "(`tj.ForkAfterJaxWarning`) with this fix; `scan` reports every DataLoader given "
            "`num_workers` other than 0 that has no `multiprocessing_context`, and a "
            "project's loader factory given it (`make_data_loader(..., num_workers=n)`)."
        ),
        runs=False,
        torch_api=("torch.utils.data.DataLoader",),
        rewrite="custom",
    ),
    Idiom(
        id="dataloader-attributes",
        section=SECTION,
        title="Read the loader's dataset, sampler and batch size",
        torch=(
            "print(len(loader.dataset), loader.batch_size)\n"
            "for epoch in range(epochs):\n"
            "    loader.sampler.set_epoch(epoch)\n"
            "    for x, y in loader:\n"
            "        ..."
        ),
        jax=(
            "# the DataLoader keeps them; the loop moves each batch itself\n"
            "print(len(loader.dataset), loader.batch_size)\n"
            "loader.sampler.set_epoch(epoch)"
        ),
        tj=(
            "loader = tj.DeviceLoader(loader, device)\n"
            "print(len(loader.dataset), loader.batch_size)\n"
            "for epoch in range(epochs):\n"
            "    loader.sampler.set_epoch(epoch)\n"
            "    for x, y in loader:\n"
            "        ..."
        ),
        notes=(
            "A `DeviceLoader` reads every attribute it does not have itself through to the "
            "loader it wraps, and sets them there (a DataLoader's own refusals, such as "
            "setting `batch_size`, raise as in torch). Its own settings are `loader`, "
            "`device`, `prefetch`, `pin_memory` and `background`: `.pin_memory` is the "
            "staging asked of the DeviceLoader, not the DataLoader's flag."
        ),
        runs=False,
    ),
)
