"""Catalog rows, section "Availability": torch.cuda, torch.accelerator and torch.backends: what is
there."""

from __future__ import annotations

from ..idiom import Idiom

SECTION = "Availability"

#: torch's device modules of accelerators other than CUDA (with the plugins that add
#: them: ``torch_npu``, ``torch_mlu``, Habana's, ``torch_musa``), whose calls mirror
#: ``torch.cuda``'s.
ACCELERATOR_MODULES = (
    "torch.xpu",
    "torch.npu",
    "torch_npu.npu",
    "torch_npu",
    "torch.mlu",
    "torch_mlu",
    "torch.hpu",
    "habana_frameworks.torch.hpu",
    "torch.musa",
    "torch_musa",
    "torch.mtia",
    "torch.mps",
)


def _accelerator_names(*calls: str) -> tuple[str, ...]:
    """``torch.xpu.is_available``, ``torch.npu.is_available``... for each of ``calls``
    (a plugin package itself, ``torch_npu``, has no calls of its own: its ``.npu`` has)."""
    return tuple(
        f"{module}.{call}"
        for call in calls
        for module in ACCELERATOR_MODULES
        if module.count(".") or module == "torch"
    )


ROWS: tuple[Idiom, ...] = (
    Idiom(
        id="cuda-is-available",
        section=SECTION,
        title="Is there a CUDA GPU?",
        torch="available = torch.cuda.is_available()",
        jax='available = "cuda" in jax.extend.backend.backends()',
        tj="available = tj.cuda.is_available()",
        notes="Starts JAX's backends on first call (JAX's rule).",
        result="available",
        torch_api=("torch.cuda.is_available",),
        tj_api=("tj.cuda.is_available",),
        rewrite="rename",
    ),
    Idiom(
        id="cuda-device-count",
        section=SECTION,
        title="How many CUDA GPUs?",
        torch="count = torch.cuda.device_count()",
        jax=(
            "backends = jax.extend.backend.backends()\n"
            'count = len(jax.local_devices(backend="cuda")) if "cuda" in backends else 0'
        ),
        tj="count = tj.cuda.device_count()",
        result="count",
        torch_api=("torch.cuda.device_count",),
        tj_api=("tj.cuda.device_count",),
        rewrite="rename",
    ),
    Idiom(
        id="cuda-current-device",
        section=SECTION,
        title="Index of the current CUDA device",
        torch="index = torch.cuda.current_device()",
        jax="# no equivalent: JAX has no current device",
        tj="index = tj.cuda.current_device()",
        result="index",
        torch_api=("torch.cuda.current_device",),
        tj_api=("tj.cuda.current_device",),
        rewrite="rename",
    ),
    Idiom(
        id="cuda-set-device",
        section=SECTION,
        title="Change the current CUDA device",
        torch="torch.cuda.set_device(1)",
        jax="# no equivalent: pass jax.local_devices(backend='cuda')[1] explicitly",
        tj="tj.cuda.set_device(1)",
        notes=(
            "Per thread, like CUDA's current device. An unindexed `tj.device('cuda')` "
            "resolves to it."
        ),
        runs=False,
        torch_api=("torch.cuda.set_device",),
        tj_api=("tj.cuda.set_device",),
        rewrite="rename",
    ),
    Idiom(
        id="cuda-device-context",
        section=SECTION,
        title="Current CUDA device for a block",
        torch="with torch.cuda.device(1):\n    ...",
        jax="# no equivalent",
        tj="with tj.cuda.device(1):\n    ...",
        runs=False,
        torch_api=("torch.cuda.device",),
        tj_api=("tj.cuda.device",),
        rewrite="rename",
    ),
    Idiom(
        id="cuda-device-name",
        section=SECTION,
        title="GPU name",
        torch="name = torch.cuda.get_device_name(0)",
        jax='name = jax.local_devices(backend="cuda")[0].device_kind',
        tj="name = tj.cuda.get_device_name(0)",
        result="name",
        torch_api=("torch.cuda.get_device_name",),
        tj_api=("tj.cuda.get_device_name",),
        rewrite="rename",
    ),
    Idiom(
        id="cuda-device-properties",
        section=SECTION,
        title="GPU properties",
        torch="props = torch.cuda.get_device_properties(0)",
        jax=(
            'gpu = jax.local_devices(backend="cuda")[0]\n'
            "sms, stats = gpu.core_count, gpu.memory_stats()"
        ),
        tj="props = tj.cuda.get_device_properties(0)",
        notes=(
            "`total_memory` is the card's physical total as the CUDA driver reports it "
            "(torch's figure); JAX's pool (`bytes_limit`: 75 % of the card with default "
            "preallocation) is in `memory_stats()` and `doctor`. Without the driver library "
            "(ROCm, TPU) it falls back to the pool."
        ),
        runs=False,
        torch_api=("torch.cuda.get_device_properties",),
        tj_api=("tj.cuda.get_device_properties",),
        rewrite="rename",
    ),
    Idiom(
        id="cuda-device-capability",
        section=SECTION,
        title="Compute capability",
        torch="capability = torch.cuda.get_device_capability()",
        jax='capability = jax.local_devices(backend="cuda")[0].compute_capability  # "9.0"',
        tj="capability = tj.cuda.get_device_capability()",
        result="capability",
        torch_api=("torch.cuda.get_device_capability",),
        tj_api=("tj.cuda.get_device_capability",),
        rewrite="rename",
    ),
    Idiom(
        id="cuda-bf16",
        section=SECTION,
        title="bfloat16 support",
        torch="bf16 = torch.cuda.is_bf16_supported()",
        jax="# XLA runs bfloat16 on every GPU (emulated before compute capability 8.0)",
        tj="bf16 = tj.cuda.is_bf16_supported()",
        result="bf16",
        torch_api=("torch.cuda.is_bf16_supported",),
        tj_api=("tj.cuda.is_bf16_supported",),
        rewrite="rename",
    ),
    Idiom(
        id="cuda-synchronize",
        section=SECTION,
        title="Wait for the GPU",
        torch="torch.cuda.synchronize()",
        jax="jax.block_until_ready(outputs)",
        tj="tj.cuda.synchronize()",
        notes=(
            "JAX has no device-wide barrier: this waits for every live array on the "
            "device and for JAX effects."
        ),
        torch_api=("torch.cuda.synchronize",),
        tj_api=("tj.cuda.synchronize",),
        rewrite="rename",
    ),
    Idiom(
        id="cuda-is-built",
        section=SECTION,
        title="Was CUDA support installed?",
        torch="built = torch.backends.cuda.is_built()",
        jax="# look for the jax-cuda12-plugin / jax-cuda13-plugin distribution",
        tj="built = tj.backends.cuda.is_built()",
        notes="Never starts JAX.",
        result="built",
        torch_api=("torch.backends.cuda.is_built",),
        tj_api=("tj.backends.cuda.is_built",),
        rewrite="rename",
    ),
    Idiom(
        id="mps-is-available",
        section=SECTION,
        title="Is there an Apple GPU?",
        torch="available = torch.backends.mps.is_available()",
        jax='available = "METAL" in jax.extend.backend.backends()',
        tj="available = tj.backends.mps.is_available()",
        notes="Served by the jax-metal plugin.",
        result="available",
        torch_api=("torch.backends.mps.is_available",),
        tj_api=("tj.backends.mps.is_available",),
        rewrite="rename",
    ),
    Idiom(
        id="accelerator-current",
        section=SECTION,
        title="Which accelerator is there?",
        torch="accelerator = torch.accelerator.current_accelerator()",
        jax='accelerator = jax.default_backend() if jax.default_backend() != "cpu" else None',
        tj="accelerator = tj.accelerator.current_accelerator()",
        notes=(
            "`None` without an accelerator; `jax.default_backend()` says `'gpu'`, not "
            "`'cuda'`. `getattr(torch, device_name)` (the accelerator's module, by its "
            "type's name) is reported under this row: `tj.cuda` answers its memory and "
            "synchronize calls for JAX's accelerator."
        ),
        result="accelerator",
        torch_api=("torch.accelerator.current_accelerator",),
        tj_api=("tj.accelerator.current_accelerator",),
        rewrite="rename",
    ),
    Idiom(
        id="accelerator-is-available",
        section=SECTION,
        title="Is there any accelerator?",
        torch="available = torch.accelerator.is_available()",
        jax='available = jax.default_backend() != "cpu"',
        tj="available = tj.accelerator.is_available()",
        result="available",
        torch_api=("torch.accelerator.is_available",),
        tj_api=("tj.accelerator.is_available",),
        rewrite="rename",
    ),
    Idiom(
        id="accelerator-device-count",
        section=SECTION,
        title="How many accelerator devices?",
        torch="count = torch.accelerator.device_count()",
        jax='count = jax.local_device_count() if jax.default_backend() != "cpu" else 0',
        tj="count = tj.accelerator.device_count()",
        result="count",
        torch_api=("torch.accelerator.device_count",),
        tj_api=("tj.accelerator.device_count",),
        rewrite="rename",
    ),
    Idiom(
        id="accelerator-current-index",
        section=SECTION,
        title="Current accelerator index",
        torch="index = torch.accelerator.current_device_index()",
        jax="# no equivalent: JAX has no current device",
        tj="index = tj.accelerator.current_device_index()",
        result="index",
        torch_api=("torch.accelerator.current_device_index",),
        tj_api=("tj.accelerator.current_device_index",),
        rewrite="rename",
    ),
    Idiom(
        id="list-devices",
        section=SECTION,
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
        id="cuda-is-initialized",
        section=SECTION,
        title="Has the GPU runtime started?",
        torch="initialized = torch.cuda.is_initialized()",
        jax="# no public equivalent: JAX starts every backend at the first device query",
        tj="initialized = tj.cuda.is_initialized()",
        notes="Whether JAX has started a CUDA backend in this process; never starts JAX.",
        result="initialized",
        torch_api=("torch.cuda.is_initialized",),
        tj_api=("tj.cuda.is_initialized",),
        rewrite="rename",
    ),
    Idiom(
        id="accelerator-set-device-index",
        section=SECTION,
        title="Change the current accelerator",
        torch="torch.accelerator.set_device_index(0)",
        jax="# no equivalent: JAX has no current device",
        tj="tj.accelerator.set_device_index(0)",
        notes="Raises without an accelerator, as torch does.",
        torch_api=("torch.accelerator.set_device_index",),
        tj_api=("tj.accelerator.set_device_index",),
        rewrite="rename",
    ),
    Idiom(
        id="mps-is-built",
        section=SECTION,
        title="Was Apple GPU support installed?",
        torch="built = torch.backends.mps.is_built()",
        jax="# look for the jax-metal distribution",
        tj="built = tj.backends.mps.is_built()",
        notes="Never starts JAX.",
        result="built",
        torch_api=("torch.backends.mps.is_built",),
        tj_api=("tj.backends.mps.is_built",),
        rewrite="rename",
    ),
    # torch's other accelerators: Intel GPUs (torch.xpu), Ascend NPUs (torch.npu, the
    # torch_npu plugin), Cambricon MLUs, Gaudi HPUs, Moore Threads GPUs, MTIA and Apple's
    # GPU (torch.mps): device-neutral twins of the torch.cuda rows, each with
    # torch.accelerator's answer (ACCELERATOR_MODULES names them all).
    Idiom(
        id="xpu-npu-is-available",
        section=SECTION,
        title="Is there an Intel GPU (XPU), an Ascend NPU or another accelerator?",
        torch="available = torch.xpu.is_available()",
        jax='available = jax.default_backend() != "cpu"',
        tj="available = tj.accelerator.is_available()",
        notes=(
            "`torch.xpu`, `torch.npu` (the Ascend plugin, `import torch_npu`), `torch.mlu`, "
            "`torch.hpu`, `torch.musa`, `torch.mtia` and `torch.mps` mirror `torch.cuda`; "
            "with JAX the question is whether any accelerator is there. JAX runs on Intel "
            "GPUs through the `intel-extension-for-openxla` plugin and on Apple's through "
            "`jax-metal`; the others have no JAX plugin, so the port runs on what JAX has."
        ),
        runs=False,
        torch_api=_accelerator_names("is_available"),
        rewrite="advice",
    ),
    Idiom(
        id="xpu-npu-device-count",
        section=SECTION,
        title="How many Intel GPUs, Ascend NPUs or other accelerators?",
        torch="count = torch.xpu.device_count()",
        jax='count = jax.local_device_count() if jax.default_backend() != "cpu" else 0',
        tj="count = tj.accelerator.device_count()",
        runs=False,
        torch_api=_accelerator_names("device_count"),
        rewrite="advice",
    ),
    Idiom(
        id="xpu-npu-current-device",
        section=SECTION,
        title="Current Intel GPU, Ascend NPU or other accelerator, and changing it",
        torch="torch.npu.set_device(local_rank)\nindex = torch.npu.current_device()",
        jax="# no equivalent: JAX has no current device; pass jax.local_devices()[i] explicitly",
        tj=(
            "tj.accelerator.set_device_index(local_rank)\n"
            "index = tj.accelerator.current_device_index()"
        ),
        notes="Per thread, like torch's current device; raises without an accelerator.",
        runs=False,
        torch_api=(
            *_accelerator_names("set_device", "current_device", "device"),
            "torch.accelerator.device_index",
            "torch.accelerator.current_device_idx",
            "torch.accelerator.set_device_idx",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="xpu-npu-synchronize",
        section=SECTION,
        title="Wait for the Intel GPU, Ascend NPU or other accelerator",
        torch="torch.xpu.synchronize()",
        jax="jax.block_until_ready(outputs)",
        tj="tj.accelerator.synchronize()",
        runs=False,
        torch_api=(*_accelerator_names("synchronize"), "torch.accelerator.synchronize"),
        rewrite="advice",
    ),
    Idiom(
        id="xpu-npu-other",
        section=SECTION,
        title="Other runtime calls of torch's other accelerators (XPU, NPU, MPS...)",
        torch="torch.npu.empty_cache()",
        jax="# XLA manages its memory, streams and caches itself",
        tj="# no counterpart: tj.accelerator answers is_available, device_count and the device",
        notes=(
            "`scan` reports every name of `torch.xpu`, `torch.npu`, `torch_npu`, "
            "`torch.mlu`, `torch.hpu`, `torch.musa`, `torch.mtia`, `torch.mps` and "
            "`torch.accelerator` that no other row covers (memory, streams, RNG, the "
            "plugin's own settings), so none is skipped silently; their counterparts are "
            "the `torch.cuda` rows' (Memory, Randomness, Streams) with the accelerator JAX "
            "has. `import torch_npu` (`torch_mlu`, `torch_musa`, Habana's "
            "`habana_frameworks.torch.core`) adds the plugin's device to torch, and `from "
            "torch_npu.contrib import transfer_to_npu` patches `torch.cuda`'s calls onto "
            "the NPU: the port imports neither."
        ),
        runs=False,
        torch_api=(*(f"{module}.*" for module in ACCELERATOR_MODULES), "torch.accelerator.*"),
        rewrite="advice",
    ),
    Idiom(
        id="cuda-other",
        section=SECTION,
        title="Other GPU runtime calls and settings",
        torch="built = torch.version.cuda is not None",
        jax="# jax.print_environment_info() prints jaxlib's CUDA",
        tj="built = tj.backends.cuda.is_built()  # torch2jax-device doctor prints the versions",
        notes=(
            "`scan` reports every `torch.cuda`, `torch.backends` and `torch.version` name "
            "that no other row covers, so none is skipped silently; most have no JAX "
            "counterpart (XLA manages streams, graphs and caches itself). torch's other "
            "accelerators (`torch.xpu`, `torch.mps`, `torch.accelerator`...) and `torch_xla` "
            "have rows of their own. torch's TunableOp switches (`PYTORCH_TUNABLEOP_ENABLED`) "
            "are torch's own: XLA autotunes its GEMMs itself (`--xla_gpu_autotune_level`)."
        ),
        result="built",
        torch_api=(
            "torch.cuda.*",
            "torch.backends.*",
            "torch.version.*",
        ),
        rewrite="advice",
    ),
)
