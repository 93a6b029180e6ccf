"""Catalog rows of section "Libraries built on torch" for the runtimes and parallel
libraries that own a job's devices: torch_xla (TPUs), DeepSpeed, Megatron's model-parallel
state and Accelerate's availability helpers. ``libraries`` lists them after its own rows.

``scan`` reports every line and rewrites none: the library owns torch's process group or
device, and the port replaces it as a whole (mixed ownership, see ``docs/scan-diff.md``).
"""

from __future__ import annotations

from ..idiom import Idiom

SECTION = "Libraries built on torch"

_XLA = "torch_xla.core.xla_model."

ROWS: tuple[Idiom, ...] = (
    Idiom(
        id="xla-device",
        section=SECTION,
        title="torch_xla: the TPU device",
        torch="import torch_xla.core.xla_model as xm\ndevice = xm.xla_device()",
        jax="device = jax.devices()[0]",
        tj="device = tj.accelerator.current_accelerator()",
        notes=(
            "JAX runs on TPUs without torch_xla: `jax.devices()` lists them (`tpu` "
            "platform), and arrays placed there (`tj.to_device(x, device)`) are computed "
            "there. `torch_xla.device()` and `xm.xla_device_hw(device)` likewise."
        ),
        runs=False,
        torch_api=(_XLA + "xla_device", "torch_xla.device", _XLA + "xla_device_hw"),
        rewrite="advice",
    ),
    Idiom(
        id="xla-optimizer-step",
        section=SECTION,
        title="torch_xla: reduce the gradients and step",
        torch="import torch_xla.core.xla_model as xm\nxm.optimizer_step(optimizer)",
        jax=(
            "loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)\n"
            "optimizer.update(model, grads)  # nnx.Optimizer(model, optax.sgd(lr), wrt=nnx.Param)"
        ),
        tj=(
            "loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)\n"
            "optimizer.update(model, grads)  # nnx.Optimizer(model, tj.optim.SGD(lr=lr), "
            "wrt=nnx.Param)"
        ),
        notes=(
            "`optimizer_step` all-reduces the gradients over the replicas and calls "
            "`optimizer.step()`; `xm.reduce_gradients` does the first half. In a jitted "
            "step over a batch sharded on a mesh, the gradients of replicated parameters "
            "are already averaged, and `optimizer.update` applies them (`tj.optim` keeps "
            "torch's update rules)."
        ),
        runs=False,
        torch_api=(_XLA + "optimizer_step", _XLA + "reduce_gradients"),
        rewrite="advice",
    ),
    Idiom(
        id="xla-world-size",
        section=SECTION,
        title="torch_xla: how many processes",
        torch="import torch_xla.runtime as xr\nworld_size = xr.world_size()",
        jax="world_size = jax.process_count()",
        tj="world_size = tj.distributed.get_world_size()",
        notes=(
            "`xr.world_size()` and the older `xm.xrt_world_size()` count torch_xla's "
            "replicas; `xr.global_runtime_device_count()` counts devices: "
            "`jax.device_count()`."
        ),
        runs=False,
        torch_api=(
            "torch_xla.runtime.world_size",
            _XLA + "xrt_world_size",
            "torch_xla.runtime.global_runtime_device_count",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="xla-ordinal",
        section=SECTION,
        title="torch_xla: which process is this",
        torch="import torch_xla.core.xla_model as xm\nrank = xm.get_ordinal()",
        jax="rank = jax.process_index()",
        tj="rank = tj.distributed.get_rank()",
        notes=(
            "`xm.get_ordinal()`, `xr.global_ordinal()` and `xm.is_master_ordinal()` "
            "(`rank == 0`); the local ones (`xm.get_local_ordinal()`, "
            "`xr.local_ordinal()`) are `tj.distributed.get_local_rank()`."
        ),
        runs=False,
        torch_api=(
            _XLA + "get_ordinal",
            _XLA + "get_local_ordinal",
            _XLA + "is_master_ordinal",
            "torch_xla.runtime.global_ordinal",
            "torch_xla.runtime.local_ordinal",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="xla-device-loader",
        section=SECTION,
        title="torch_xla: a loader that feeds the device",
        torch=(
            "import torch_xla.distributed.parallel_loader as pl\n"
            "loader = pl.MpDeviceLoader(loader, device)"
        ),
        jax="loader = (jax.device_put(batch, device) for batch in loader)",
        tj="loader = tj.DeviceLoader(loader, device)",
        notes=(
            "`MpDeviceLoader` and `ParallelLoader(...).per_device_loader(device)` copy "
            "batches to the device ahead of the step; `tj.DeviceLoader` prefetches the "
            "same way, and a sharding as its device builds global batches over a mesh."
        ),
        runs=False,
        torch_api=(
            "torch_xla.distributed.parallel_loader.MpDeviceLoader",
            "torch_xla.distributed.parallel_loader.ParallelLoader",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="xla-mark-step",
        section=SECTION,
        title="torch_xla: cut and run the traced graph",
        torch="import torch_xla.core.xla_model as xm\nxm.mark_step()",
        jax="# nothing: jax.jit compiles the step function and runs it when called",
        tj="# nothing: jax.jit (nnx.jit) compiles the step function and runs it when called",
        notes=(
            "torch_xla traces tensor operations lazily and `mark_step()` (`torch_xla.sync()`) "
            "compiles and runs what was traced; JAX compiles the functions `jax.jit` "
            "wraps. `xm.wait_device_ops()` waits for the device: `jax.block_until_ready`."
        ),
        runs=False,
        torch_api=(_XLA + "mark_step", "torch_xla.sync", _XLA + "wait_device_ops"),
        rewrite="advice",
    ),
    Idiom(
        id="xla-other",
        section=SECTION,
        title="torch_xla: other calls",
        torch="import torch_xla.debug.metrics as met\nprint(met.metrics_report())",
        jax="# XLA's own: jax.profiler, XLA_FLAGS and jax.config",
        tj="# no counterpart: JAX is XLA's own front end (see jax.profiler and XLA_FLAGS)",
        notes=(
            "`scan` reports every `torch_xla` name no other row covers, so none is "
            "skipped silently. Collectives (`xm.all_reduce`, `xm.rendezvous`) are the "
            "`library-collective` row's, `xm.save` the `library-checkpoint` row's and "
            "`xmp.spawn` the `mp-spawn` row's."
        ),
        runs=False,
        torch_api=("torch_xla.*",),
        rewrite="advice",
    ),
    Idiom(
        id="deepspeed-activation-checkpoint",
        section=SECTION,
        title="DeepSpeed: activation checkpointing",
        torch=(
            "import deepspeed\n"
            "deepspeed.checkpointing.configure(mpu, partition_activations=True)\n"
            "hidden = deepspeed.checkpointing.checkpoint(layer, hidden)"
        ),
        jax="hidden = jax.checkpoint(layer_fn)(params, hidden)",
        tj="hidden = nnx.remat(lambda layer, x: layer(x))(layer, hidden)",
        notes=(
            "DeepSpeed's `checkpointing.configure` sets up recomputation of activations "
            "(partitioned over model-parallel ranks); it is not a checkpoint file. JAX "
            "recomputes what `jax.checkpoint` / `nnx.remat` wraps; a sharded mesh "
            "partitions the saved activations as it does the rest."
        ),
        runs=False,
        torch_api=(
            "deepspeed.checkpointing.configure",
            "deepspeed.checkpointing.checkpoint",
            "deepspeed.runtime.activation_checkpointing.checkpointing.configure",
            "deepspeed.runtime.activation_checkpointing.checkpointing.checkpoint",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="megatron-parallel-state",
        section=SECTION,
        title="Megatron and DeepSpeed: the model-parallel ranks, groups and topology",
        torch=(
            "from megatron.core import mpu\n"
            "dp_rank = mpu.get_data_parallel_rank()\n"
            "tp_size = mpu.get_tensor_model_parallel_world_size()"
        ),
        jax=('mesh = jax.make_mesh((dp, tp), ("data", "model"))\ntp_size = mesh.shape["model"]'),
        tj=(
            'mesh = tj.distributed.init_device_mesh("cuda", (dp, tp), mesh_dim_names=("data", '
            '"model"))\n'
            'tp_size = mesh.shape["model"]'
        ),
        notes=(
            "`mpu` (`megatron.core.parallel_state`) holds torch process groups per "
            "parallelism: `initialize_model_parallel`, `get_*_parallel_rank`, "
            "`get_*_parallel_world_size`, `get_*_parallel_group`; DeepSpeed's "
            "`PipeModelDataParallelTopology(num_pp=, num_mp=, num_dp=)` lays the same "
            "axes out. With JAX they are the "
            "axes of one mesh: sizes are `mesh.shape[axis]`, and collectives over a group "
            "are `jax.lax` collectives over an axis name inside `shard_map`; which slice "
            "of an axis a process holds follows from `jax.process_index()` and the mesh's "
            "`devices` array (xDiT's `xfuser.core.distributed`: "
            "`initialize_model_parallel(sequence_parallel_degree=, ring_degree=, "
            "ulysses_degree=)`, `get_sequence_parallel_world_size()`, is the same for "
            "a sequence axis). Megatron's RNG tracker "
            "(`tensor_parallel.model_parallel_cuda_manual_seed(seed)`) seeds each "
            "tensor-parallel rank apart: `jax.random.fold_in(key, tp_rank)`."
        ),
        runs=False,
        torch_api=(
            "megatron.core.mpu.*",
            "megatron.core.parallel_state.*",
            "megatron.mpu.*",
            # the RNG tracker: a seed per tensor-parallel rank (a key folded with the rank)
            *(
                f"megatron.core.tensor_parallel.{name}"
                for name in (
                    "model_parallel_cuda_manual_seed",
                    "get_cuda_rng_tracker",
                    "random.model_parallel_cuda_manual_seed",
                    "random.get_cuda_rng_tracker",
                    "random.initialize_rng_tracker",
                )
            ),
            "deepspeed.runtime.pipe.topology.ProcessTopology",
            "deepspeed.runtime.pipe.topology.PipeDataParallelTopology",
            "deepspeed.runtime.pipe.topology.PipeModelDataParallelTopology",
            "deepspeed.runtime.pipe.ProcessTopology",
            # xDiT's (xFuser's) Megatron-style state: sequence-, ring- and Ulysses-parallel
            # groups over the ranks a video model shards its tokens on
            "xfuser.core.distributed.*",
            "xfuser.core.distributed.parallel_state.*",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="library-is-available",
        section=SECTION,
        title="Accelerate's and Transformers' availability helpers",
        torch="from accelerate.utils import is_xpu_available\navailable = is_xpu_available()",
        jax='available = jax.default_backend() != "cpu"',
        tj="available = tj.accelerator.is_available()",
        notes=(
            "`is_xpu_available`, `is_npu_available`, `is_mlu_available`, "
            "`is_torch_xla_available` (and Transformers' `is_torch_*_available`, "
            "`is_torch_tpu_available` in older releases) ask "
            "whether torch has that accelerator: with JAX, `tj.accelerator.is_available()` "
            "and `tj.accelerator.current_accelerator().type`. `is_mps_available` is "
            "`tj.backends.mps.is_available()`, `is_cuda_available` "
            "`tj.cuda.is_available()`, `is_bf16_available` "
            "`tj.cuda.is_bf16_supported()`; `is_ccl_available` asks for Intel's collectives "
            "library, a backend JAX does not take (`tj.distributed.init_process_group()` "
            "chooses its own)."
        ),
        runs=False,
        torch_api=tuple(
            f"{module}.{helper}"
            for module in ("accelerate.utils", "accelerate.utils.imports")
            for helper in (
                "is_xpu_available",
                "is_npu_available",
                "is_mlu_available",
                "is_mps_available",
                "is_cuda_available",
                "is_torch_xla_available",
                "is_bf16_available",
                "is_ccl_available",
            )
        )
        + tuple(
            f"{module}.is_torch_{kind}_available"
            # transformers.utils re-exports import_utils' helpers; the top level some
            for module in ("transformers.utils", "transformers.utils.import_utils", "transformers")
            for kind in ("xpu", "npu", "mlu", "mps", "cuda", "xla", "bf16_gpu", "hpu", "musa")
        )
        # the older Transformers' module of them, and its name for torch_xla's
        + tuple(
            f"{module}.is_torch_{kind}_available"
            for module in ("transformers.file_utils", "transformers.utils", "transformers")
            for kind in ("tpu", *(("xpu", "npu", "cuda") if module.endswith("file_utils") else ()))
        ),
        rewrite="advice",
    ),
)
