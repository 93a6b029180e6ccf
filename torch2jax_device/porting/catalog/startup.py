"""Catalog rows, section "Start-up": What JAX reads once, when it starts: platforms, preallocation,
memory fraction."""

from __future__ import annotations

from ..idiom import Idiom

SECTION = "Start-up"

ROWS: tuple[Idiom, ...] = (
    Idiom(
        id="lazy-gpu-memory",
        section=SECTION,
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
        section=SECTION,
        title="Cap the GPU memory used",
        torch="torch.cuda.set_per_process_memory_fraction(0.5)",
        jax='os.environ["XLA_CLIENT_MEM_FRACTION"] = "0.5"  # before JAX starts',
        tj="tj.cuda.set_per_process_memory_fraction(0.5)",
        notes="Same as `tj.configure(memory_fraction=0.5)`: before JAX starts, all GPUs.",
        runs=False,
        torch_api=("torch.cuda.set_per_process_memory_fraction",),
        tj_api=("tj.cuda.set_per_process_memory_fraction",),
        rewrite="rename",
    ),
    Idiom(
        id="select-platforms",
        section=SECTION,
        title="Keep JAX off the GPU",
        torch='os.environ["CUDA_VISIBLE_DEVICES"] = ""',
        jax='jax.config.update("jax_platforms", "cpu")  # before JAX starts, else ignored',
        tj='tj.configure(platforms="cpu")',
        notes="Write `cuda,cpu`, never `gpu` (JAX then also requires ROCm and oneAPI).",
        runs=False,
    ),
    Idiom(
        id="collect-env",
        section=SECTION,
        title="Report the environment",
        torch="# python -m torch.utils.collect_env",
        jax="jax.print_environment_info()",
        tj="# torch2jax-device doctor   (or python -m torch2jax_device doctor)",
        notes=(
            "Versions, backends, devices and memory, plus every start-up variable JAX or "
            "XLA would refuse or misread, each with its fix. JAX starts in a separate "
            "process, so a setting that ends JAX's start-up is reported, never fatal; "
            "`--json` for scripts."
        ),
        runs=False,
    ),
    Idiom(
        id="startup-order",
        section=SECTION,
        title="Join the job before anything starts JAX",
        torch='torch.cuda.set_device(local_rank)\ndist.init_process_group(backend="nccl")',
        jax="jax.distributed.initialize()  # before jax.devices() or the first array",
        tj=('tj.distributed.init_process_group(backend="nccl")\ntj.cuda.set_device(local_rank)'),
        notes=(
            "JAX-starting calls (`jax.devices()`, factories, `to_device`, loads, random "
            "keys) must come after `jax.distributed.initialize`; PyTorch does not mind the "
            "order. Under a launcher (`RANK`, `WORLD_SIZE` set) tj's own queries "
            "(`tj.cuda.is_available()`, `set_device`) join the job first "
            "([availability queries before joining](#dist-startup-order)), but a job "
            "started with `init_method='tcp://...'` and no launcher has none to join, so "
            "`scan` reports each JAX-starting call that runs before `init_process_group` "
            "(or `tj.configure`), and `--diff` never writes one there."
        ),
        runs=False,
        torch_api=("torch.distributed.init_process_group",),
        tj_api=("tj.distributed.init_process_group",),
        rewrite="custom",
    ),
    Idiom(
        id="cuda-visible-devices",
        section=SECTION,
        title="Choose the GPUs a process sees",
        torch='os.environ["CUDA_VISIBLE_DEVICES"] = "0"',
        jax='os.environ["CUDA_VISIBLE_DEVICES"] = "0"  # before JAX starts',
        tj='os.environ["CUDA_VISIBLE_DEVICES"] = "0"  # before JAX starts',
        notes=(
            "JAX reads it once, when it starts: at the first device query "
            "(`tj.cuda.device_count()` included) or array; torch when CUDA starts (the "
            "first CUDA tensor). Once started, both keep the GPUs they had; "
            "`torch.cuda.device_count()` alone asks NVML, which reads the variable again "
            "(torch 2.11 counted 0 GPUs after it was emptied), `tj.cuda.device_count()` "
            "does not."
        ),
        runs=False,
        torch_api=("os.environ",),
        rewrite="custom",
    ),
    Idiom(
        id="cuda-alloc-conf",
        section=SECTION,
        title="Tune the GPU allocator",
        torch='os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"',
        jax='os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"  # before JAX starts',
        tj="tj.configure(preallocate=False)",
        notes=(
            "JAX's allocator is set by `XLA_PYTHON_CLIENT_*` variables, which "
            "`tj.configure` (before JAX starts) checks and sets: `preallocate`, "
            "`memory_fraction`, `allocator`. `scan` reports torch's variable under its names "
            "since 2.9 too (`PYTORCH_ALLOC_CONF`)."
        ),
        runs=False,
        torch_api=("os.environ",),
        tj_api=("tj.configure",),
        rewrite="custom",
    ),
)
