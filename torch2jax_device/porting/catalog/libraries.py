"""Catalog rows, section "Libraries built on torch": Hugging Face Accelerate and Lightning
Fabric, which own a script's device work (placement, the process group, precision).

Each row covers both libraries: the ``torch`` column shows Accelerate, the notes name
Fabric's counterpart. ``scan`` reports every line and rewrites none: the library's object
does several jobs at once, and which of them the port keeps is the porter's choice.
"""

from __future__ import annotations

from ..idiom import Idiom
from . import runtimes
from .distributed import FSDP_JAX, FSDP_TJ

SECTION = "Libraries built on torch"

# The libraries' own torch.distributed, over torch's process group (DeepSpeed's
# ``deepspeed.comm``, Composer's ``composer.utils.dist``): each function by what it does.
_DIST_TWINS = ("deepspeed.comm", "composer.utils.dist")


def _twins(*names: str) -> tuple[str, ...]:
    """``names`` in every library's torch.distributed twin."""
    return tuple(f"{twin}.{name}" for twin in _DIST_TWINS for name in names)


_OWN_ROWS: tuple[Idiom, ...] = (
    Idiom(
        id="library-launcher",
        section=SECTION,
        title="The library's entry object: devices, processes, precision",
        torch=(
            'from accelerate import Accelerator\naccelerator = Accelerator(mixed_precision="bf16")'
        ),
        jax=(
            "jax.distributed.initialize()  # under a launcher; nothing for one process\n"
            "device = jax.local_devices()[0]"
        ),
        tj=(
            "tj.distributed.init_process_group()  # under torchrun or torch2jax-device run\n"
            'device = tj.device(f"cuda:{tj.distributed.get_local_rank()}")'
        ),
        notes=(
            "`Accelerator(...)`, `PartialState()`, Fabric's `Fabric(accelerator=, devices=, "
            "precision=, strategy=)` and `fabric.launch()` join the job, pick the device and "
            "set up mixed precision (as do the trainers built on them: Hugging Face's "
            "`Trainer` and `TrainingArguments`, a project's subclass of them included, "
            "Lightning's `Trainer`; Dora's and flashy's "
            "`distrib.init()`). With JAX: join with "
            "`tj.distributed.init_process_group` "
            "before anything starts JAX, keep the device, and get mixed precision from the "
            "dtypes (`bfloat16` parameters or inputs; `jnp.bfloat16` casts inside the step), "
            "not from a context. `scan` reports the members of these objects however the "
            "script reaches them: a parameter annotated with the class, `self` in a "
            "subclass (a `LightningModule`'s `self.device`, `self.global_rank`), "
            "`trainer.args`, the engine `deepspeed.initialize` returns, and the "
            "parameters of the libraries' callback hooks (Transformers' `on_save(self, "
            "args, state, control)`, Lightning's `on_train_epoch_end(self, trainer, "
            "pl_module)`). Composer's `Trainer(precision=, parallelism_config=)` and "
            "`dist.initialize_dist(device)` likewise; the launcher's keywords (`devices=`, "
            "`accelerator=`, `precision=`, `strategy=`) are reported where the script "
            "writes them: a name chosen in branches, a dict splatted into the launcher, a "
            'config named for the trainer (`trainer_config["devices"]`), the command-line '
            "options of a script that works on them before the call (`--precision` mapped "
            "to `args.precision = 16`, `args.num_nodes * args.devices` for the global "
            "batch), a project's factory named for it (`accelerator = "
            "prepare_accelerator(args)`), and a parser of dataclasses given training "
            "arguments (`HfArgumentParser`, TRL's `TrlParser` with `SFTConfig`). Ray "
            "places a process per GPU it is asked for (`@ray.remote(num_gpus=1)`, "
            '`actor.options(num_gpus=n)`, a placement group\'s `{"GPU": 1}` bundles): with '
            "JAX one process per host sees all its devices; xDiT's "
            "`init_distributed_environment` joins torch's group as `init_process_group` does. "
            "ColossalAI's `Booster(plugin=...)` (its `boost`, `backward`, `no_sync`, "
            "`execute_pipeline` and `checkpoint_io` are the rows of the same jobs) and "
            "DeepSpeed's `deepspeed.add_config_arguments(parser)` (the launcher's "
            "`--deepspeed_config`), ColossalAI's `colossalai.launch_from_torch()` and "
            "torchtune's `get_distributed_backend(device_type)` likewise."
            " Horovod's `hvd.init()` likewise (with JAX: `jax.distributed.initialize()`, which "
            "reads Open MPI's variables under mpirun)."
        ),
        runs=False,
        torch_api=(
            "accelerate.Accelerator",
            "accelerate.accelerator.Accelerator",  # imported from its own module
            "accelerate.PartialState",
            "accelerate.state.PartialState",
            "accelerate.state.AcceleratorState",
            "lightning.fabric.Fabric",
            "lightning.Fabric",
            "lightning_fabric.Fabric",
            "Fabric.launch",
            "torchtune.training.init_distributed",
            "torchtune.utils.init_distributed",
            "accelerate.notebook_launcher",
            "deepspeed.init_distributed",
            *_twins("init_distributed", "initialize_dist"),
            # xDiT's (xFuser's) join of torch's process group, before its parallel state
            "xfuser.core.distributed.init_distributed_environment",
            "xfuser.core.distributed.parallel_state.init_distributed_environment",
            "accelerate.InitProcessGroupKwargs",  # the timeout and backend of its join
            "accelerate.utils.InitProcessGroupKwargs",
            "dora.distrib.init",
            "flashy.distrib.init",
            "Accelerator.mixed_precision",
            "Accelerator.native_amp",  # its autocast switched off (CogVideoX on MPS)
            "transformers.Trainer",
            "transformers.Seq2SeqTrainer",
            "transformers.TrainingArguments",
            "transformers.Seq2SeqTrainingArguments",
            "lightning.Trainer",
            "lightning.pytorch.Trainer",
            "lightning.pytorch.trainer.Trainer",
            "pytorch_lightning.Trainer",
            "pytorch_lightning.trainer.Trainer",
            "composer.Trainer",  # MosaicML Composer's: devices, processes, precision
            "composer.trainer.Trainer",
            # ColossalAI's Booster: the plugin (DDP, ZeRO, hybrid parallelism), precision
            "colossalai.booster.Booster",
            "colossalai.booster.booster.Booster",
            # DeepSpeed's launcher options (--deepspeed, --deepspeed_config) added to a parser
            "deepspeed.add_config_arguments",
            # ColossalAI's join of torch's process group (under torchrun, SLURM, Open MPI)
            *(
                f"colossalai.{launch}"
                for launch in (
                    "launch",
                    "launch_from_torch",
                    "launch_from_slurm",
                    "launch_from_openmpi",
                )
            ),
            # torchtune's backend of the group ("cuda:nccl,cpu:gloo" with CPU offload)
            "torchtune.training.get_distributed_backend",
            # Horovod's join of the job (under horovodrun or mpirun)
            "horovod.torch.init",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="library-device",
        section=SECTION,
        title="The device the library chose",
        torch="x = x.to(accelerator.device)",
        jax="x = jax.device_put(x, jax.local_devices()[0])",
        tj="x = tj.to_device(x, device)",
        notes=(
            "`accelerator.device`, `fabric.device`, `PartialState().device` and torchtune's "
            "`get_device(...)` are this process's device: after "
            '`tj.distributed.init_process_group`, `tj.device(f"cuda:{local_rank}")` (or '
            "`tj.get_default_device()`). Fabric's `with fabric.init_module():` and "
            "Accelerate's `init_on_device` create the model there: `with tj.device(device):`. "
            "`device_map=` (Transformers, Diffusers) places a model's layers over the "
            'devices: with JAX, `tj.load_state(model, path, device_map=...)` takes `"auto"` '
            "or a `{module prefix: device}` map, `max_memory=` its budgets; the map is "
            "reported where it is set and where it is handed over, a dict that carries it "
            'included (`kwargs["device_map"] = ...` then `from_pretrained(**kwargs)`). '
            "Transformers' `training_args.device` is the device the Trainer chose, and "
            "`model.hf_device_map` the map a loaded model got (a plan's `modules()`). "
            "DeepSpeed's `with deepspeed.zero.Init():` builds the model partitioned over the "
            "ranks: `nnx.eval_shape` builds it with no memory, and `tj.load_state` fills "
            "it where it goes. "
            "Accelerate's `get_max_memory()` (and `get_balanced_memory()`, the same budgets "
            "balanced over the GPUs) is the budget map `max_memory=` takes (a "
            "map trimmed before it is handed over is reported where it changes). "
            "Stable-Baselines3's `ReplayBuffer(..., device)` and "
            "`RolloutBuffer` hand back torch tensors on that device: keep NumPy in the "
            "buffer and `jax.device_put` the sampled batch. Ray's `ray.get_gpu_ids()` and "
            "`ray.get_runtime_context().get_accelerator_ids()` are the GPUs Ray gave the "
            "worker: `jax.local_devices()`. torchtune's `training.get_memory_stats(device)` "
            "reads that device's allocator: `tj.cuda.memory_stats()` (its "
            "`cleanup_before_training`, which empties the cache, and Diffusers' "
            "`free_memory()` likewise); ColossalAI's "
            '`get_current_device()` and Stable-Baselines3\'s `get_device("auto")` are '
            "this process's device. Whisper's `whisper.load_model(name, device)` loads "
            "the torch model onto that device: load the weights with "
            "`tj.load_state(model, path, device=device)` into a JAX port of the model."
            " TorchRec's `dense_device=` / `compute_device=` and a pipeline's `_device`, DGL's "
            "`DataLoader(use_uva=)` and Transformers' `training_args.no_cuda` / `_n_gpu` (set "
            "in a subclass's `_setup_devices`) are the device the library chose or was told."
        ),
        runs=False,
        torch_api=(
            "Accelerator.device",
            "Fabric.device",
            "Fabric.init_module",
            "DeepSpeedEngine.device",
            "TrainingArguments.device",
            "deepspeed.zero.Init",  # ZeRO-3 builds the model partitioned over the ranks
            "accelerate.init_empty_weights",
            "accelerate.init_on_device",
            "accelerate.utils.get_max_memory",  # the budgets max_memory= takes, per device
            # llm-foundry's: the context (meta, cpu, cuda) the model is built in
            "llmfoundry.utils.process_init_device",
            "llmfoundry.utils.config_utils.process_init_device",
            "accelerate.utils.modeling.get_max_memory",
            # the budgets balanced over the GPUs, for infer_auto_device_map's max_memory=
            "accelerate.utils.get_balanced_memory",
            "accelerate.utils.modeling.get_balanced_memory",
            "torchtune.training.get_device",
            "torchtune.utils.get_device",
            # torchtune's memory statistics of the device it chose, its memory freed
            "torchtune.training.get_memory_stats",
            "torchtune.utils.get_memory_stats",
            "torchtune.training.cleanup_before_training",
            "diffusers.training_utils.free_memory",  # gc, then the device's cache emptied
            "torchtune.training.validate_no_params_on_meta_device",
            # ColossalAI's device of this process, Stable-Baselines3's device chosen by name
            "colossalai.utils.get_current_device",
            "colossalai.accelerator.get_accelerator",
            "stable_baselines3.common.utils.get_device",
            "ray.get_gpu_ids",  # the GPUs Ray gave this worker
            "stable_baselines3.common.buffers.ReplayBuffer",
            "stable_baselines3.common.buffers.RolloutBuffer",
            "whisper.load_model",  # OpenAI Whisper's model, loaded onto the device given
            # Transformers' own device choice, in a subclass's _setup_devices
            "TrainingArguments.no_cuda",
            "TrainingArguments.use_cpu",
            "TrainingArguments._n_gpu",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="library-prepare",
        section=SECTION,
        title="Hand the model, optimizer and loaders to the library",
        torch="model, optimizer, loader = accelerator.prepare(model, optimizer, loader)",
        jax=(
            "model = jax.device_put(model, device)  # or a NamedSharding over a mesh\n"
            "optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)"
        ),
        tj=(
            "model = tj.to_device(model, device)\n"
            "optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)\n"
            "loader = tj.DeviceLoader(loader, device)"
        ),
        notes=(
            "`prepare` (Fabric: `setup`, `setup_module`, `setup_optimizers`, "
            "`setup_dataloaders`) moves the model, wraps it for data parallelism and shards "
            "the loader per rank. With JAX the model is placed (replicated over a mesh for "
            "data parallelism, see `dist-ddp-gradient`), the loader is wrapped in "
            "`tj.DeviceLoader`, and a `DistributedSampler` shards the data. "
            "DeepSpeed's `deepspeed.initialize` and its engine (`model_engine.backward`, "
            "`.step`, `.save_checkpoint`) do the same. "
            "`unwrap_model(model)` is the model itself; `split_between_processes(data)` is "
            "`data[rank::world_size]` with `tj.distributed.get_rank()`. A Diffusers "
            "pipeline's `enable_model_cpu_offload()` / `enable_sequential_cpu_offload()` "
            "hook `cpu_offload` onto its models (`library-cpu-offload`). DeepSpeed's AutoTP "
            "`deepspeed.tp_model_init(model, tp_size=)` shards the layers over the "
            "tensor-parallel ranks: a `NamedSharding` over a mesh's model axis. Lightning "
            "Thunder's `thunder.distributed.ddp(model)` and `fsdp(model)` wrap the model "
            "the same way. Accelerate's `accelerator._optimizers` (`_models`, "
            "`_schedulers`, `_dataloaders`) lists what `prepare` wrapped: the port keeps "
            "its own objects, unwrapped."
            " Horovod's `hvd.DistributedOptimizer(opt, named_parameters=...)` averages the "
            "gradients (the optimizer itself, with a replicated model); TorchRec's "
            "`DistributedModelParallel(module, device=, plan=)` shards the embedding tables and "
            "replicates the rest; DGL's `DataLoader(use_ddp=True)` splits the indices per rank."
            " ColossalAI's `plugin.prepare_dataloader(dataset, ...)` splits the data per "
            "data-parallel rank, and a boosted model's `model.unwrap()` is the model itself "
            "(Transformers' `unwrap_model(model)` likewise)."
        ),
        runs=False,
        torch_api=(
            "Accelerator.prepare",
            "Accelerator.prepare_model",
            "Accelerator.prepare_optimizer",
            "Accelerator.prepare_data_loader",
            "Accelerator.prepare_scheduler",
            "Accelerator.unwrap_model",
            "Accelerator.split_between_processes",
            "Accelerator.skip_first_batches",
            # Transformers' unwrap_model (the model under DDP, DeepSpeed, a compiled wrapper)
            "transformers.modeling_utils.unwrap_model",
            # what prepare() wrapped, kept in the Accelerator's own lists
            "Accelerator._optimizers",
            "Accelerator._models",
            "Accelerator._schedulers",
            "Accelerator._dataloaders",
            "Fabric.setup",
            "Fabric.setup_module",
            "Fabric.setup_optimizers",
            "Fabric.setup_dataloaders",
            "Booster.boost",  # ColossalAI's: the model, optimizer, loader and scheduler wrapped
            "deepspeed.initialize",
            "deepspeed.init_inference",
            "deepspeed.tp_model_init",  # AutoTP: the model split over tensor-parallel ranks
            "accelerate.dispatch_model",
            "accelerate.load_checkpoint_and_dispatch",
            "accelerate.infer_auto_device_map",
            "accelerate.cpu_offload",
            "thunder.distributed.ddp",  # Lightning Thunder's own data-parallel wrappers
            "thunder.distributed.fsdp",
            # Horovod's optimizer wrapper, TorchRec's sharded model
            "horovod.torch.DistributedOptimizer",
            "torchrec.distributed.model_parallel.DistributedModelParallel",
            "torchrec.distributed.DistributedModelParallel",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="library-to-device",
        section=SECTION,
        title="Move what the library did not set up",
        torch="weights = fabric.to_device(weights)",
        jax="weights = jax.device_put(weights, device)",
        tj="weights = tj.to_device(weights, device)",
        notes=(
            "Fabric's `to_device` and Accelerate's `send_to_device(x, device)` move tensors, "
            "modules and containers of them; `tj.to_device` moves arrays, trees of them and "
            "Flax NNX modules."
            " fairseq's `utils.move_to_cuda(sample)` / `move_to_cpu` likewise."
            " Accelerate's hooks `cpu_offload_with_hook(module, device)` and "
            "`AlignDevicesHook(device)` move a module's weights to the execution device "
            "before each forward: place the arrays once with `tj.to_device`, or keep them in "
            "host memory (`library-cpu-offload`). A Trainer subclass's "
            "`self._prepare_inputs(inputs)` moves the batch to `args.device`: "
            "`tj.to_device(inputs, device)`."
        ),
        runs=False,
        torch_api=(
            "Fabric.to_device",
            "accelerate.utils.send_to_device",
            "accelerate.utils.operations.send_to_device",
            "torchtune.utils.batch_to_device",
            "torchtune.training.batch_to_device",
            # a Trainer's batch moved to args.device (a subclass's training_step)
            "Trainer._prepare_inputs",
            "Trainer._prepare_input",
            # fairseq's moves of a sample (a nested dict of tensors)
            "fairseq.utils.move_to_cuda",
            "fairseq.utils.move_to_cpu",
            # Accelerate's big-model hooks: a module's weights moved to the execution
            # device before its forward (and back after it)
            "accelerate.cpu_offload_with_hook",
            "accelerate.hooks.cpu_offload_with_hook",
            "accelerate.hooks.AlignDevicesHook",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="library-collective",
        section=SECTION,
        title="Gather, reduce and wait through the library",
        torch="predictions = accelerator.gather(predictions)",
        jax="predictions = multihost_utils.process_allgather(predictions)",
        tj="predictions = multihost_utils.process_allgather(predictions)",
        notes=(
            "`gather`, `gather_for_metrics`, `reduce`, `pad_across_processes`, "
            "`wait_for_everyone` (Fabric: `all_gather`, `all_reduce`, `broadcast`, "
            "`barrier`). Between processes: `jax.experimental.multihost_utils` "
            "(`process_allgather`, `broadcast_one_to_all`), "
            "`tj.distributed.all_reduce` for host values and `tj.distributed.barrier()`. "
            "`gather_for_metrics` also drops the samples padded onto the last batch. "
            "torch_xla's `xm.all_reduce`, `xm.all_gather`, `xm.mesh_reduce` and "
            "`xm.rendezvous` (a barrier) likewise, and the trainer frameworks' own "
            "(flashy's `distrib.average_metrics`). DeepSpeed's "
            "`zero.GatheredParameters(params)` gathers ZeRO-3's shards for a block: JAX "
            "gathers a sharded array where code needs it whole (or `jax.device_put` it "
            "replicated). DeepSpeed's `deepspeed.comm` (`import deepspeed.comm as dist`: "
            "its own `barrier`, `all_reduce`, `broadcast`...) works on torch's process group "
            "as `torch.distributed` does, and ports the same way; so does Composer's "
            "`composer.utils.dist` (`dist.barrier()`, `dist.get_global_rank()`: "
            "`library-process`). Ray's `ray.util.collective` (`init_collective_group`, "
            "`broadcast`, `allreduce` between actors) and vLLM's `PyNcclCommunicator` "
            "broadcast weights between processes: `multihost_utils.broadcast_one_to_all`. "
            "DeepSpeed's `safe_get_full_grad(p)` / `safe_get_full_fp32_param(p)` gather a "
            "ZeRO-3 shard whole, ColossalAI's `coordinator.block_all()` is a barrier. "
            "A TensorDict's `isend(dst=0)` / `irecv(src=1)` (TorchRL's collectors) send "
            "each leaf through `torch.distributed`: `jax.lax.ppermute` inside `shard_map`."
            ' Horovod\'s `hvd.allreduce` (a mean by default: `op="mean"`), `allgather`, '
            "`broadcast` and `broadcast_parameters(model.state_dict(), root_rank=0)` likewise."
        ),
        runs=False,
        torch_api=(
            "Accelerator.gather",
            "Accelerator.gather_for_metrics",
            "Accelerator.reduce",
            "Accelerator.pad_across_processes",
            "Accelerator.wait_for_everyone",
            "Fabric.all_gather",
            "Fabric.all_reduce",
            "Fabric.broadcast",
            "Fabric.barrier",
            "DistCoordinator.block_all",  # ColossalAI's barrier
            "accelerate.utils.gather",
            "accelerate.utils.gather_object",
            "accelerate.utils.broadcast",
            "accelerate.utils.reduce",
            "torch_xla.core.xla_model.all_reduce",
            "torch_xla.core.xla_model.all_gather",
            "torch_xla.core.xla_model.mesh_reduce",
            "torch_xla.core.xla_model.rendezvous",
            "deepspeed.zero.GatheredParameters",
            # a ZeRO-3 parameter's, gradient's or optimizer state's shards gathered whole
            "deepspeed.utils.safe_get_full_fp32_param",
            "deepspeed.utils.safe_get_full_grad",
            "deepspeed.utils.safe_get_full_optimizer_state",
            # deepspeed.comm, composer.utils.dist: torch.distributed over the same group
            *_twins(
                "barrier",
                "all_reduce",
                "reduce",
                "all_gather",
                "all_gather_object",
                "all_gather_into_tensor",
                "broadcast",
                "broadcast_object_list",
                "reduce_scatter_tensor",
                "all_to_all_single",
            ),
            "deepspeed.comm.*",
            # Ray's collectives between its workers (NCCL or Gloo groups of actors)
            "ray.util.collective.*",
            # vLLM's NCCL communicator (weights broadcast to its workers)
            "vllm.distributed.device_communicators.pynccl.PyNcclCommunicator",
            "vllm_ascend.distributed.device_communicators.pyhccl.PyHcclCommunicator",
            "sglang.srt.distributed.device_communicators.pynccl.PyNcclCommunicator",
            "flashy.distrib.average_metrics",
            "flashy.distrib.all_reduce",
            "flashy.distrib.broadcast_tensors",
            "flashy.distrib.barrier",
            # PyTorch-Ignite's idist (its all_gather hands back the gathered tensor)
            *(
                f"ignite.distributed.{name}"
                for name in ("all_gather", "all_reduce", "broadcast", "barrier")
            ),
            # Horovod's collectives (an allreduce averages by default)
            *(
                f"horovod.torch.{name}"
                for name in (
                    "allreduce",
                    "allreduce_",
                    "allgather",
                    "broadcast",
                    "broadcast_",
                    "broadcast_object",
                    "broadcast_parameters",
                    "broadcast_optimizer_state",
                )
            ),
        ),
        rewrite="advice",
    ),
    Idiom(
        id="library-backward",
        section=SECTION,
        title="Backward, mixed precision and accumulation through the library",
        torch="accelerator.backward(loss)\noptimizer.step()",
        jax=(
            "loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)\noptimizer.update(model, grads)"
        ),
        tj=(
            "loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)\noptimizer.update(model, grads)"
        ),
        notes=(
            "`backward` scales the loss for mixed precision and syncs gradients; "
            "`autocast()`, `accumulate(model)`, `no_sync`, `clip_grad_norm_` (Fabric: "
            "`backward`, `autocast`, `no_backward_sync`, `clip_gradients`). JAX computes "
            "gradients with `nnx.value_and_grad` in a jitted step; a replicated model on a "
            "mesh averages them over the batch axis by itself, bfloat16 needs no loss "
            "scaling, and `optax.clip_by_global_norm` / `optax.MultiSteps` clip and "
            "accumulate. DeepSpeed's engine is reported where a script keeps it in a "
            "model's name too (`model.backward(loss)`, `model.step()` in a file that uses "
            "DeepSpeed), and its `get_global_grad_norm()` wherever it is reached: "
            "`optax.global_norm(grads)`. ColossalAI's `booster.backward(loss, optimizer)`, "
            "`booster.no_sync(model, optimizer)` and `booster.execute_pipeline(...)` (forward "
            "and backward over the pipeline's stages) likewise."
            " Accelerate's `optimizer_step_was_skipped` (the loss scaler skipped a step) and "
            "timm's `NativeScaler` (`loss_scaler(loss, optimizer, clip_grad=...)`: backward, "
            "clipping and step behind a GradScaler) likewise: bfloat16 skips no step."
        ),
        runs=False,
        torch_api=(
            "Accelerator.backward",
            "Accelerator.autocast",
            "Accelerator.accumulate",
            "Accelerator.no_sync",
            "Accelerator.clip_grad_norm_",
            "Accelerator.sync_gradients",
            "Fabric.backward",
            "Fabric.autocast",
            "Fabric.no_backward_sync",
            "Fabric.clip_gradients",
            "DeepSpeedEngine.backward",
            "DeepSpeedEngine.step",
            # ColossalAI's Booster: loss scaling, accumulation, the pipeline's schedule
            "Booster.backward",
            "Booster.no_sync",
            "Booster.execute_pipeline",
            # a Trainer's autocast context for the forward, and SageMaker's pipelined
            # forward and backward (a subclass's training_step)
            "Trainer.compute_loss_context_manager",
            "Trainer.autocast_smart_context_manager",
            "transformers.trainer_pt_utils.smp_forward_backward",
            # Accelerate's loss scaler skipped the step; timm's scalers run the backward
            "Accelerator.optimizer_step_was_skipped",
            "timm.utils.NativeScaler",
            "timm.utils.ApexScaler",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="library-strategy",
        section=SECTION,
        title="The library's parallelism: Fabric strategies, Accelerate's plugins",
        torch=(
            "from lightning.fabric.strategies import FSDPStrategy\n"
            "strategy = FSDPStrategy(auto_wrap_policy=policy, activation_checkpointing=Block)\n"
            'fabric = L.Fabric(accelerator="cuda", devices=4, strategy=strategy)'
        ),
        jax=FSDP_JAX,
        tj=FSDP_TJ,
        notes=(
            "Fabric's and Lightning's `FSDPStrategy`, `DeepSpeedStrategy`, `DDPStrategy`, "
            "`XLAStrategy` and `ModelParallelStrategy`, `isinstance(fabric.strategy, ...)`, "
            "Accelerate's `FullyShardedDataParallelPlugin` and `DeepSpeedPlugin` "
            '(`getattr(accelerator.state, "fsdp_plugin", None)`) and Transformers\' '
            "`trainer.deepspeed` / `is_fsdp_enabled` / `training_args.deepspeed` (and "
            "`is_deepspeed_zero3_enabled()`, `model.is_parallelizable = True`) choose "
            "how the model and optimizer state are split over the processes. With JAX that "
            "is the mesh and each array's sharding: replicate for data parallelism "
            "(`dist-ddp-gradient`), shard the parameters whose first dimension divides "
            "over an axis for FSDP/ZeRO-3 (`dist-fsdp`); XLA inserts the gathers. "
            "Activation checkpointing is `nnx.remat` on the block; CPU offload has no "
            "counterpart (keep the optimizer state on the device, or in host memory "
            "kinds where the backend has them). A branch on the strategy's type becomes "
            "a branch on the sharding the port chose, as do a strategy tested by its name "
            '(`"deepspeed" in args.strategy`), a script\'s flag (`if args.deepspeed:`), a '
            'ZeRO-3 parameter probed (`hasattr(p, "ds_numel")`: a sharded array keeps its '
            "whole shape), a DeepSpeed plugin a project's helper builds for the "
            "`Accelerator`, Accelerate's `ParallelismConfig` and its "
            "`DistributedDataParallelKwargs`. DeepSpeed's "
            "`estimate_zero3_model_states_mem_needs_all_live` estimates the memory of a "
            "split (with JAX: the arrays' shardings' `addressable_shards` sizes), a "
            "DeepSpeed plugin's `zero3_init_context_manager(enable=False)` builds a model "
            "whole rather than partitioned, a script's engine tested by name (`train_engine "
            '== "deepspeed"`) is a branch on the sharding, and torchtune\'s '
            "`get_act_offloading_ctx_manager` offloads activations to the host (with JAX: "
            "`jax.checkpoint` with an offloading policy, or `nnx.remat`). torchtune's "
            "`shard_model` (FSDP2 over the mesh), `prepare_mha_for_tp` and `ParallelDims`, "
            "DeepSpeed's `PipelineModule` and "
            "ZeRO-3's `ZeroParamStatus` likewise."
            " TorchRec's `EmbeddingShardingPlanner` and its `collective_plan` (how each "
            "embedding table is split), fairscale's `enable_wrap` / `wrap`, its FSDP "
            "(`mixed_precision=`, `cpu_offload=`), `ShardedDataParallel` and `OSS`, and "
            "Transformers' `sharded_ddp` likewise."
        ),
        runs=False,
        torch_api=(
            # SageMaker model parallelism asked for (a Trainer subclass's training_step)
            "transformers.utils.is_sagemaker_mp_enabled",
            *(
                f"{package}.{strategy}"
                for package in (
                    "lightning.fabric.strategies",
                    "lightning_fabric.strategies",
                    "lightning.pytorch.strategies",
                    "pytorch_lightning.strategies",
                )
                for strategy in (
                    "FSDPStrategy",
                    "DeepSpeedStrategy",
                    "DDPStrategy",
                    "XLAStrategy",
                    "XLAFSDPStrategy",
                    "ModelParallelStrategy",
                )
            ),
            "Fabric.strategy",
            "Trainer.deepspeed",
            "Trainer.is_deepspeed_enabled",
            "Trainer.is_fsdp_enabled",
            "TrainingArguments.deepspeed",
            # ZeRO-3 on (Transformers' integration), the model's own parallelism flags
            *(
                f"{module}.is_deepspeed_zero3_enabled"
                for module in (
                    "transformers.deepspeed",
                    "transformers.integrations",
                    "transformers.integrations.deepspeed",
                )
            ),
            "Accelerator.fsdp_plugin",  # on accelerator.state, Accelerate's AcceleratorState
            "Accelerator.deepspeed_plugin",
            "accelerate.FullyShardedDataParallelPlugin",
            "accelerate.utils.FullyShardedDataParallelPlugin",
            "accelerate.DeepSpeedPlugin",
            "accelerate.utils.DeepSpeedPlugin",
            # DDP's settings (bucket views, a static graph) handed to the Accelerator
            "accelerate.DistributedDataParallelKwargs",
            "accelerate.utils.DistributedDataParallelKwargs",
            # the tp/cp/dp sizes the Accelerator builds its device mesh from
            "accelerate.ParallelismConfig",
            "accelerate.utils.ParallelismConfig",
            "accelerate.parallelism_config.ParallelismConfig",
            # ColossalAI's plugins, which the Booster runs the model under
            *(
                f"colossalai.booster.plugin.{plugin}"
                for plugin in (
                    "LowLevelZeroPlugin",
                    "HybridParallelPlugin",
                    "GeminiPlugin",
                    "TorchDDPPlugin",
                    "TorchFSDPPlugin",
                    "MoeHybridParallelPlugin",
                )
            ),
            # DeepSpeed's estimates of ZeRO-2's and ZeRO-3's memory per device
            "deepspeed.runtime.zero.stage_1_and_2.estimate_zero2_model_states_mem_needs_all_live",
            "deepspeed.runtime.zero.stage3.estimate_zero3_model_states_mem_needs_all_live",
            # torchtune's FSDP2 sharding, tensor and context parallelism, activation
            # checkpointing
            "torchtune.training.shard_model",
            "torchtune.training.get_shard_conditions",
            "torchtune.training.prepare_mha_for_tp",
            "torchtune.training.ParallelDims",
            "torchtune.training.get_context_parallel_manager",
            "torchtune.training.get_train_context",
            # DeepSpeed's pipeline and ZeRO-3's parameters: their status, leaf modules
            "deepspeed.pipe.PipelineModule",
            "deepspeed.runtime.pipe.PipelineModule",
            "deepspeed.runtime.zero.partition_parameters.ZeroParamStatus",
            "deepspeed.utils.set_z3_leaf_modules",
            # torchtune's activations offloaded to the host during the backward
            "torchtune.training.get_act_offloading_ctx_manager",
            "torchtune.training.OffloadActivations",
            # TorchRec's sharding planner; fairscale's FSDP and sharded DDP
            "torchrec.distributed.planner.EmbeddingShardingPlanner",
            "fairscale.nn.wrap.enable_wrap",
            "fairscale.nn.wrap.wrap",
            "fairscale.nn.wrap.auto_wrap",
            "fairscale.nn.FullyShardedDataParallel",
            "fairscale.nn.data_parallel.FullyShardedDataParallel",
            "fairscale.nn.data_parallel.ShardedDataParallel",
            "fairscale.optim.OSS",
            "Trainer.sharded_dpp",
            "Trainer.sharded_ddp",
            "TrainingArguments.sharded_ddp",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="library-checkpoint",
        section=SECTION,
        title="Save and load through the library",
        torch='accelerator.save_state("checkpoint")\naccelerator.load_state("checkpoint")',
        jax="# orbax.checkpoint, or safetensors.flax of the flattened nnx.state(model)",
        tj=(
            'tj.save_file(model, "checkpoint/model.safetensors")\n'
            'model = tj.load_state(model, "checkpoint/model.safetensors")'
        ),
        notes=(
            "`save_state`/`load_state` (model, optimizer, RNG and sampler states), `save`, "
            "`save_model` (Fabric: `save`, `load`, `load_raw`; torch_xla: `xm.save`; "
            "Transformers' `trainer.save_model(dir)` and `trainer._save(dir, state_dict=)`, "
            "which gather a DeepSpeed or FSDP model first; Lightning's "
            "`trainer.save_checkpoint(path)`, through its strategy). "
            "`tj.save_file` and "
            "`tj.load_state` keep the model's arrays; save the optimizer state "
            "(`nnx.state(optimizer)`) and the step the same way or with orbax. Hugging "
            "Face's `model.save_pretrained(dir)` (a Transformers or Diffusers model, a "
            "pipeline, Diffusers' `EMAModel`) writes the weights as safetensors: "
            "`tj.save_file`; Accelerate's `register_save_state_pre_hook` / "
            "`register_load_state_pre_hook` choose what `save_state` writes; DeepSpeed's "
            "`convert_zero_checkpoint_to_fp32_state_dict` gathers ZeRO's shards into one "
            "file (a sharded array is saved whole by `tj.save_file`); ColossalAI's "
            "`booster.save_model` / `load_model`, `booster.checkpoint_io` and "
            "`GeneralCheckpointIO`, and torchtune's `get_full_optimizer_state_dict` / "
            "`load_from_full_optimizer_state_dict` (the sharded optimizer state gathered "
            "and loaded) likewise."
            " timm's `get_state_dict(model_ema)` is `tj.state_dict(model)`, and its loss "
            "scaler's `state_dict()` has nothing to keep without loss scaling."
            " Diffusers' `EMAModel.from_pretrained(dir, model_cls=...)` loads the EMA copy: "
            "`tj.load_state(ema_model, path)`."
            " Accelerate's `load_checkpoint_in_model(model, path, device_map=)` loads a "
            "checkpoint into a model by a device map: `tj.load_state(model, path, "
            "device_map=...)`."
        ),
        runs=False,
        torch_api=(
            "Accelerator.save_state",
            "Accelerator.load_state",
            "Accelerator.save",
            "Accelerator.save_model",
            "Accelerator.get_state_dict",
            "Accelerator.register_for_checkpointing",
            # the hooks that decide what save_state / load_state write and read
            "Accelerator.register_save_state_pre_hook",
            "Accelerator.register_load_state_pre_hook",
            # ColossalAI's Booster: its savers, and its asynchronous writes waited for
            "Booster.checkpoint_io",
            "Booster.save_model",
            "Booster.load_model",
            "Booster.save_optimizer",
            "Booster.load_optimizer",
            "Booster.save_lr_scheduler",
            "Booster.load_lr_scheduler",
            # Diffusers' EMA copy of a model, loaded from a saved one (save_pretrained's)
            "diffusers.training_utils.EMAModel.from_pretrained",
            # Accelerate's loader of a checkpoint into a model, placed by a device map
            "accelerate.load_checkpoint_in_model",
            "accelerate.utils.load_checkpoint_in_model",
            "accelerate.utils.modeling.load_checkpoint_in_model",
            "Trainer.save_model",
            "Trainer._save",
            "Trainer._save_checkpoint",
            # a subclass of Lightning's ModelCheckpoint calling its savers
            "ModelCheckpoint._save_topk_checkpoint",
            "ModelCheckpoint._save_last_checkpoint",
            # Lightning's checkpoint callback itself, which saves the model as it trains
            *(
                f"{package}.{path}ModelCheckpoint"
                for package in ("lightning.pytorch", "pytorch_lightning")
                for path in ("callbacks.", "callbacks.model_checkpoint.")
            ),
            "Fabric.save",
            "Fabric.load",
            "Fabric.load_raw",
            "DeepSpeedEngine.save_checkpoint",
            "DeepSpeedEngine.load_checkpoint",
            # the ZeRO-3 shards gathered into one state dict (trainer.model_wrapped's)
            "DeepSpeedEngine._zero3_consolidated_16bit_state_dict",
            "torchtune.training.load_from_full_model_state_dict",
            "torchtune.training.gather_cpu_state_dict",
            "torch_xla.core.xla_model.save",
            # torchtune's optimizer state gathered from the shards and loaded into them
            "torchtune.training.get_full_optimizer_state_dict",
            "torchtune.training.load_from_full_optimizer_state_dict",
            "torchtune.training.DistributedCheckpointer",
            # ColossalAI's checkpoint IO (its Booster's savers go through one)
            "colossalai.checkpoint_io.GeneralCheckpointIO",
            "Booster.save_lora_as_pretrained",
            # ZeRO's shards gathered into one fp32 state dict, offline
            "deepspeed.utils.zero_to_fp32.convert_zero_checkpoint_to_fp32_state_dict",
            "deepspeed.utils.zero_to_fp32.get_fp32_state_dict_from_zero_checkpoint",
            "deepspeed.utils.zero_to_fp32.load_state_dict_from_zero_checkpoint",
            # timm's state dict of a (DDP- or EMA-wrapped) model
            "timm.utils.get_state_dict",
            "timm.utils.model.get_state_dict",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="library-process",
        section=SECTION,
        title="Which process is this, and how many are there",
        torch="if accelerator.is_main_process:\n    print(accelerator.num_processes)",
        jax="if jax.process_index() == 0:\n    print(jax.process_count())",
        tj=("if tj.distributed.get_rank() == 0:\n    print(tj.distributed.get_world_size())"),
        notes=(
            "`is_main_process`, `is_local_main_process`, `process_index`, "
            "`local_process_index`, `num_processes`, `distributed_type`, "
            "`main_process_first()` (Fabric: `global_rank`, `local_rank`, `node_rank`, "
            "`world_size`, `is_global_zero`, `rank_zero_first()`): "
            "`tj.distributed.get_rank`, `get_local_rank` and `get_world_size` after joining "
            "(`deepspeed.comm.get_rank()` likewise; Lightning's `@rank_zero_only` is "
            "`if tj.distributed.get_rank() == 0:` where the function is called); "
            "the backend is `tj.device(...).type`. Transformers' `TrainingArguments` "
            "(`training_args.local_rank`, `process_index`, `world_size`, `should_save`: "
            "rank 0 saves; `trainer.args` is the Trainer's) and `Trainer`'s "
            "`is_world_process_zero()`, and the trainer frameworks' own (Dora's and "
            "flashy's `distrib.rank()`, `world_size()`, `is_rank_zero()`) likewise."
            " Horovod's `hvd.rank()`, `local_rank()`, `size()` and `local_size()`, TorchRec's "
            "`get_local_size()` and Transformers' `get_process_log_level()` (a level for the "
            "main process, another for the rest) likewise; so are PyTorch-Ignite's "
            "`idist.get_rank()`, `get_local_rank()`, `get_world_size()`, "
            "`get_nproc_per_node()`, `get_nnodes()` and `get_node_rank()` (`import "
            'ignite.distributed as idist`, or MONAI\'s `optional_import("ignite", ..., '
            '"distributed")`), and its collectives `library-collective`\'s.'
        ),
        runs=False,
        torch_api=(
            *(
                f"ignite.distributed.{name}"
                for name in (
                    "get_rank",
                    "get_local_rank",
                    "get_world_size",
                    "get_nproc_per_node",
                    "get_nnodes",
                    "get_node_rank",
                )
            ),
            "Accelerator.is_main_process",
            "Accelerator.is_local_main_process",
            "Accelerator.process_index",
            "Accelerator.local_process_index",
            "Accelerator.num_processes",
            "Accelerator.distributed_type",
            "Accelerator.main_process_first",
            "Accelerator.local_main_process_first",
            "Accelerator.is_last_process",
            "Accelerator.use_distributed",
            "Accelerator.on_main_process",
            "Accelerator.on_local_main_process",
            "Fabric.global_rank",
            "Fabric.local_rank",
            "Fabric.node_rank",
            "Fabric.world_size",
            "Fabric.is_global_zero",
            "DeepSpeedEngine.local_rank",
            "DeepSpeedEngine.global_rank",
            "TrainingArguments.local_rank",
            "TrainingArguments.process_index",
            "TrainingArguments.local_process_index",
            "TrainingArguments.world_size",
            "TrainingArguments.n_gpu",
            "TrainingArguments.parallel_mode",
            "TrainingArguments.should_save",
            "TrainingArguments.should_log",
            "TrainingArguments.main_process_first",
            "Trainer.is_world_process_zero",
            "Trainer.is_local_process_zero",
            "Fabric.rank_zero_first",
            *_twins(
                "get_rank",
                "get_global_rank",
                "get_world_size",
                "get_local_rank",
                "get_local_world_size",
                "get_node_rank",
                "is_initialized",
            ),
            # Lightning's @rank_zero_only (and its .rank) runs a function on rank 0 alone
            *(
                f"{package}.{name}"
                for package in (
                    "lightning.pytorch.utilities",
                    "lightning.pytorch.utilities.rank_zero",
                    "lightning.fabric.utilities",
                    "lightning.fabric.utilities.rank_zero",
                    "lightning_fabric.utilities",
                    "lightning_fabric.utilities.rank_zero",
                    "pytorch_lightning.utilities",
                    "pytorch_lightning.utilities.rank_zero",
                    "pytorch_lightning.utilities.distributed",  # its place before 1.6
                )
                for name in ("rank_zero_only", "rank_zero_only.rank")
            ),
            "torchtune.training.get_world_size_and_rank",
            "torchtune.utils.get_world_size_and_rank",
            "torchtune.training.is_distributed",
            "dora.distrib.rank",
            "dora.distrib.world_size",
            "dora.distrib.is_distributed",
            "flashy.distrib.rank",
            "flashy.distrib.world_size",
            "flashy.distrib.is_rank_zero",
            "flashy.distrib.is_distributed",
            # ColossalAI's DistCoordinator: the rank, the world size, the master process
            "colossalai.cluster.DistCoordinator",
            "colossalai.cluster.dist_coordinator.DistCoordinator",
            "DistCoordinator.is_master",
            "DistCoordinator.is_node_master",
            "DistCoordinator.rank",
            "DistCoordinator.world_size",
            "DistCoordinator.local_rank",
            # Horovod's, TorchRec's; Transformers' log level by rank
            *(
                f"horovod.torch.{name}"
                for name in ("rank", "local_rank", "size", "local_size", "cross_rank")
            ),
            "torchrec.distributed.comm.get_local_size",
            "TrainingArguments.get_process_log_level",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="library-seed",
        section=SECTION,
        title="Seed everything through the library",
        torch="from accelerate.utils import set_seed\nset_seed(42)",
        jax="key = jax.random.key(42)",
        tj="key = jax.random.key(42)",
        notes=(
            "Accelerate's `set_seed`, Lightning's `seed_everything`, torchtune's "
            "`set_seed` and transformers' `set_seed` seed Python, NumPy and torch. JAX "
            "takes a key in every random call (`nnx.Rngs(42)` for a model); keep "
            "`random.seed`/`np.random.seed` for host-side code (Lhotse's `fix_random_seed` "
            "likewise). `scan` keys JAX with the "
            "script's own seed (`set_seed(args.seed)` becomes `jax.random.key(args.seed)`); "
            "the library's call still seeds torch's DataLoader shuffle. Transformers' "
            "`enable_full_determinism(seed)` also turns torch's deterministic algorithms on: "
            "XLA on GPU is deterministic with `--xla_gpu_deterministic_ops=true`."
            " fairseq's `utils.set_torch_seed(seed)` likewise."
        ),
        runs=False,
        torch_api=(
            "accelerate.utils.set_seed",
            "accelerate.utils.random.set_seed",
            "lightning.fabric.seed_everything",
            "lightning.seed_everything",
            "lightning.pytorch.seed_everything",
            "lightning_fabric.seed_everything",
            "pytorch_lightning.seed_everything",
            "transformers.set_seed",
            # set_seed, and torch's deterministic algorithms and CUDA settings on
            "transformers.enable_full_determinism",
            "transformers.trainer_utils.enable_full_determinism",
            "composer.utils.reproducibility.seed_all",  # Composer's: Python, NumPy, torch
            "torchtune.training.set_seed",
            "colossalai.utils.set_seed",  # ColossalAI's: Python, NumPy and torch
            "deepspeed.runtime.utils.set_random_seed",
            "Fabric.seed_everything",
            "lhotse.utils.fix_random_seed",  # Lhotse's (icefall's recipes): Python, NumPy, torch
            "lhotse.fix_random_seed",
            "fairseq.utils.set_torch_seed",  # fairseq's: torch's CPU and CUDA generators
        ),
        rewrite="advice",
    ),
    # A model bigger than the GPU (issue 39): the rows of docs/how-to/big-models.md. Their
    # torch names are still scanned under library-device and library-prepare.
    Idiom(
        id="library-device-map-auto",
        section=SECTION,
        title="Load a model bigger than the GPU: device_map='auto' and max_memory",
        torch=(
            "model = AutoModelForCausalLM.from_pretrained(\n"
            '    name, device_map="auto", max_memory={0: "20GiB", "cpu": "100GiB"}\n'
            ")"
        ),
        jax=(
            "gpu = jax.devices()[0]\n"
            "kinds = {n: 'device' if i < fits else 'pinned_host' for i, n in enumerate(names)}\n"
            "params = {n: jax.device_put(a, SingleDeviceSharding(gpu, memory_kind=kinds[n]))\n"
            "          for n, a in safetensors.numpy.load_file(path).items()}"
        ),
        tj=(
            "params = tj.load_file(\n"
            '    path, device="auto", max_memory={"cuda:0": "20GiB", "cpu": "100GiB"}\n'
            ")\n"
            'print(tj.DeviceMap.plan(path, max_memory={"cuda:0": "20GiB", "cpu": "100GiB"}))'
        ),
        notes=(
            "`tj.DeviceMap` plans from the safetensors header alone, as Accelerate plans: "
            "the names in natural order (the model's: `layers.2` before `layers.10`; a "
            "header's own order is its writer's layout), a module's tensors together, over "
            'the accelerators `max_memory` names (only those: `{"cpu": "100GiB"}` keeps '
            "the model off the GPUs; without `max_memory`, every local one), each up to its "
            "budget (`max_memory`, else 90 % of its free memory; over several GPUs, "
            '`"auto"` gives each a balanced share, as Transformers\' `device_map="auto"`; '
            '`device_map="sequential"` fills them in turn), then the first accelerator\'s '
            "`pinned_host` memory (host RAM jitted code can read), then the CPU device; each "
            "tensor is read straight to its place. Accelerate's `max_memory` keys "
            '(`0`, `"cpu"`) and sizes '
            '(`"20GiB"`, `"20GB"`) mean the same; `"pinned_host"` caps the pinned '
            'part of the host\'s share. There is no `"disk"` tier (a safetensors file is '
            "memory-mapped already). See the how-to `big-models.md`."
        ),
        runs=False,
    ),
    Idiom(
        id="library-init-empty-weights",
        section=SECTION,
        title="A model with no memory yet: init_empty_weights, the meta device",
        torch=(
            "with accelerate.init_empty_weights():\n"
            "    model = Model(config)\n"
            'model = model.to_empty(device="cuda")'
        ),
        jax="model = nnx.eval_shape(lambda: Model(config, rngs=nnx.Rngs(0)))",
        tj=(
            "model = nnx.eval_shape(lambda: Model(config, rngs=nnx.Rngs(0)))\n"
            "tj.device_of(model)  # device(type='meta')\n"
            'model = tj.load_state(model, path, device="auto")'
        ),
        notes=(
            "`nnx.eval_shape` builds the model abstractly: every variable holds a "
            "`jax.ShapeDtypeStruct` and no memory (torch's `meta` tensors, as "
            "`tj.device_of` calls it). `tj.state_dict` of it gives the shapes, which "
            "`tj.DeviceMap.plan` takes. Fill it with `tj.load_state(model, path, device=)`: "
            "no full copy is made on any device. `to_empty` (memory without values) has "
            "no use in JAX, where arrays are made with their values."
        ),
        runs=False,
    ),
    Idiom(
        id="library-load-checkpoint-and-dispatch",
        section=SECTION,
        title="Fill an empty model from a checkpoint, spread over devices",
        torch=(
            "with init_empty_weights():\n"
            "    model = Model(config)\n"
            "model = load_checkpoint_and_dispatch(\n"
            '    model, path, device_map="auto", max_memory={0: "20GiB", "cpu": "100GiB"}\n'
            ")"
        ),
        jax=(
            "model = nnx.eval_shape(lambda: Model(config, rngs=nnx.Rngs(0)))\n"
            "arrays = safetensors.flax.load_file(path)  # all of it on the default device\n"
            "flat = {tuple(name.split('.')): array for name, array in arrays.items()}\n"
            "nnx.update(model, nnx.State.from_flat_path(flat))"
        ),
        tj=(
            "model = nnx.eval_shape(lambda: Model(config, rngs=nnx.Rngs(0)))\n"
            "model = tj.load_state(\n"
            '    model, path, device="auto", max_memory={"cuda:0": "20GiB", "cpu": "100GiB"}\n'
            ")"
        ),
        notes=(
            "The plan follows the model's order (an abstract model lists its arrays by "
            "name: `nnx.eval_shape` rebuilds it). A checkpoint in a PyTorch twin's layout "
            "(`weight` as `(out, in)`) loads too: tensors that need a transpose or a cast "
            "are read to the host, adapted and moved. Equinox models from "
            "`eqx.filter_eval_shape` load the same way."
        ),
        runs=False,
    ),
    Idiom(
        id="library-cpu-offload",
        section=SECTION,
        title="Compute with weights kept in host memory: cpu_offload",
        torch=('accelerate.cpu_offload(model, execution_device="cuda:0")\nlogits = model(x)'),
        jax=(
            "gpu = jax.devices()[0]\n"
            'host = SingleDeviceSharding(gpu, memory_kind="pinned_host")\n'
            "params = jax.device_put(params, host)\n"
            "@jax.jit\n"
            "def forward(params, x):\n"
            '    params = jax.device_put(params, SingleDeviceSharding(gpu, memory_kind="device"))\n'
            "    return apply(params, x)\n"
            "logits = forward(params, x)"
        ),
        tj=(
            'plan = tj.DeviceMap.plan(path, device_map={"": ("cuda:0", "pinned_host")})\n'
            "params = tj.load_file(path, device_map=plan)\n"
            "logits = jax.jit(lambda p, x: apply(plan.to_execution_device(p), x))(params, x)"
        ),
        notes=(
            "Accelerate moves each layer's weights to the GPU in a hook before it runs. In "
            "JAX the weights stay in `pinned_host` memory and the jitted function brings "
            "them into device memory (`plan.to_execution_device`, a `jax.device_put` to "
            "the device's memory kind inside `jit`): XLA schedules the copies with the "
            "computation, and the device holds them only while the program runs. Weights "
            "on the CPU device (the plan's last tier) must be moved before the call."
        ),
        runs=False,
    ),
    Idiom(
        id="library-dispatch-model",
        section=SECTION,
        title="Place a model's layers by an explicit device map: dispatch_model",
        torch=('model = dispatch_model(model, device_map={"layers.0": 0, "layers.1": "cpu"})'),
        jax=(
            "state = nnx.state(model)\n"
            "state['layers'][0] = jax.device_put(state['layers'][0], jax.devices()[0])\n"
            "nnx.update(model, state)"
        ),
        tj=(
            "model = tj.load_state(\n"
            "    model,\n"
            "    tj.state_dict(model),\n"
            '    device_map={"layers.0": "cuda:0", "layers.1": ("cuda:0", "pinned_host")},\n'
            ")"
        ),
        notes=(
            'A key is a module prefix as Accelerate writes them (`""` covers '
            'everything) or a wildcard (`"layers.1*"`); the most specific key that '
            "matches wins (the longest module prefix, as Accelerate places; a wildcard "
            "counts its literal characters). "
            'Values are devices (`"cuda:0"`, `0`, `"cpu"`) or `(device, '
            '"pinned_host")`. A map that leaves a tensor unplaced, names a device '
            "that is not here or overfills a budget is refused before anything moves. "
            "`tj.DeviceMap.modules()` prints a plan in this form."
        ),
        runs=False,
    ),
)

#: This section's rows: the libraries' objects above, then their runtimes' (``runtimes``).
ROWS: tuple[Idiom, ...] = (*_OWN_ROWS, *runtimes.ROWS)
