"""Catalog rows, section "Distributed": torchrun, init_process_group, DDP and device meshes."""

from __future__ import annotations

from ..idiom import Idiom

#: FSDP's port: each parameter sharded over a mesh axis where its first dimension
#: divides, replicated otherwise (the dist-fsdp row's, and the library rows' that wrap it).
_SHARD_STATE = (
    "state = jax.tree.map(\n"
    '    lambda a: jax.device_put(a, NamedSharding(mesh, P("fsdp") if a.ndim and '
    "a.shape[0] % mesh.size == 0 else P())),\n"
    "    nnx.state(model),\n"
    ")\n"
    "nnx.update(model, state)"
)
FSDP_JAX = 'mesh = jax.make_mesh((jax.device_count(),), ("fsdp",))\n' + _SHARD_STATE
FSDP_TJ = (
    'mesh = tj.distributed.init_device_mesh("cuda", (jax.device_count(),),'
    ' mesh_dim_names=("fsdp",))\n' + _SHARD_STATE
)

SECTION = "Distributed"

ROWS: tuple[Idiom, ...] = (
    Idiom(
        id="dist-init-process-group",
        section=SECTION,
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
        torch_api=("torch.distributed.init_process_group",),
        tj_api=("tj.distributed.init_process_group",),
        rewrite="rename",
    ),
    Idiom(
        id="dist-not-initialized",
        section=SECTION,
        title="Process-group calls before joining fail",
        torch="rank = dist.get_rank()  # ValueError: Default process group has not been ...",
        jax="rank = jax.process_index()  # 0: JAX has no notion of an uninitialized group",
        tj="rank = tj.distributed.get_rank()  # DistributedError, a ValueError",
        runs=False,
        torch_api=("torch.distributed.get_rank", "torch.distributed.get_world_size"),
        tj_api=("tj.distributed.get_rank", "tj.distributed.get_world_size"),
        rewrite="rename",
    ),
    Idiom(
        id="dist-local-rank",
        section=SECTION,
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
        torch_api=("os.environ",),
        tj_api=("tj.distributed.get_local_rank",),
        rewrite="custom",
    ),
    Idiom(
        id="dist-device-mesh",
        section=SECTION,
        title="A mesh over every process's devices",
        torch='mesh = init_device_mesh("cuda", (2, 4), mesh_dim_names=("dp", "tp"))',
        jax='mesh = jax.make_mesh((2, 4), ("dp", "tp"), devices=jax.devices("cuda"))',
        tj='mesh = tj.distributed.init_device_mesh("cuda", (2, 4), mesh_dim_names=("dp", "tp"))',
        notes=(
            "Returns a `jax.sharding.Mesh` of all devices of all processes: the shape "
            "multiplies to `jax.device_count()`, the world size only with one device "
            "per process. Initializes the process group under a launcher, as torch does. "
            'Accelerate\'s `parallelism_config.build_device_mesh("cuda")` builds the '
            "same mesh from its config's sizes."
        ),
        runs=False,
        torch_api=("torch.distributed.device_mesh.init_device_mesh",),
        tj_api=("tj.distributed.init_device_mesh",),
        rewrite="rename",
    ),
    Idiom(
        id="dist-sampler-global-batch",
        section=SECTION,
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
            "rows in rank order, split over the mesh's first axis. Local batches of "
            "different shapes on different ranks raise `DistributedError` on every rank "
            "(`drop_last=True`, `DistributedSampler` padding, or pad + mask)."
        ),
        runs=False,
        torch_api=(
            "torch.utils.data.distributed.DistributedSampler",
            "torch.utils.data.DistributedSampler",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="dist-ddp-gradient",
        section=SECTION,
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
            "same seed everywhere, or `multihost_utils.broadcast_one_to_all`. `scan` "
            "reports DDP's own keywords (`device_ids=`, `output_device=`) given to any call, "
            "a project's helper that wraps the model included, or kept in a dict spread into "
            "DDP, and `model.device_ids`. DDP's `register_comm_hook` (fp16/bf16 compression "
            "of the all-reduce) has no hook: cast the gradients inside the step. "
            "`model._ddp_params_and_buffers_to_ignore` (what DDP leaves unsynced) set for a "
            "library's trainer: those arrays get a sharding of their own."
            " A project module's re-export of DDP (`ext_dist.DDP(module)`) likewise."
        ),
        runs=False,
        torch_api=(
            "torch.nn.parallel.DistributedDataParallel",
            "torch.nn.parallel.distributed.DistributedDataParallel",
            "apex.parallel.DistributedDataParallel",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="dist-all-reduce",
        section=SECTION,
        title="Reduce a value over all ranks",
        torch="dist.all_reduce(t, op=dist.ReduceOp.SUM)  # in place",
        jax="# a jitted reduction over a (process, local device) mesh of per-process values",
        tj="t = tj.distributed.all_reduce(t, op=tj.distributed.ReduceOp.SUM)",
        notes=(
            "For host-side values (metrics): returns the result, as a `jax.Array` on "
            "the process's first device, instead of updating in place. `sum`, `max`, "
            "`min`, `product`, `mean`, and `band`/`bor`/`bxor` for integers and bools; "
            "the result keeps each leaf's dtype, as torch's in place. Ranks meet at "
            "JAX's coordinator first and compare their trees, shapes and dtypes: a "
            "mismatch raises on every rank, a missing rank after the timeout, instead "
            "of garbage or a hang."
        ),
        runs=False,
        torch_api=("torch.distributed.all_reduce",),
        rewrite="advice",
    ),
    Idiom(
        id="dist-all-reduce-mean",
        section=SECTION,
        title="Average a metric over ranks",
        torch="dist.all_reduce(loss, op=dist.ReduceOp.SUM)\nloss /= dist.get_world_size()",
        jax="# a jitted mean over a (process, local device) mesh of per-process values",
        tj='loss = tj.distributed.all_reduce(loss, op="mean")',
        notes=(
            "torch's gloo averages floating point only (`AVG` of integers raises "
            'there); `tj`\'s `"mean"` (`ReduceOp.AVG`) takes any dtype and gives '
            "floating point for integers."
        ),
        runs=False,
    ),
    Idiom(
        id="dist-barrier",
        section=SECTION,
        title="Wait for every rank",
        torch="dist.barrier()",
        jax="# jax.experimental.multihost_utils.sync_global_devices(name) (a device collective)",
        tj="tj.distributed.barrier()",
        notes=(
            "Runs on JAX's coordination service with the group's timeout; a rank that "
            "does not come makes the others raise `DistributedError` naming it."
        ),
        runs=False,
        torch_api=("torch.distributed.barrier",),
        tj_api=("tj.distributed.barrier",),
        rewrite="rename",
    ),
    Idiom(
        id="dist-destroy",
        section=SECTION,
        title="Leave the job",
        torch="dist.destroy_process_group()",
        jax="jax.distributed.shutdown()",
        tj="tj.distributed.destroy_process_group()",
        notes=(
            "Waits until every process shuts down (up to the timeout). The process "
            "cannot join another job afterwards."
        ),
        runs=False,
        torch_api=("torch.distributed.destroy_process_group",),
        tj_api=("tj.distributed.destroy_process_group",),
        rewrite="rename",
    ),
    Idiom(
        id="dist-launch",
        section=SECTION,
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
    Idiom(
        id="dist-startup-order",
        section=SECTION,
        title="Availability queries before joining",
        torch=(
            'device_type = "cuda" if torch.cuda.is_available() else "cpu"\n'
            "torch.cuda.set_device(local_rank)\n"
            'dist.init_process_group(backend="nccl")'
        ),
        jax=(
            "jax.distributed.initialize(...)  # first: jax.devices() before it is an error\n"
            'device_type = "cuda" if jax.devices()[0].platform == "gpu" else "cpu"'
        ),
        tj=(
            'device_type = "cuda" if tj.cuda.is_available() else "cpu"\n'
            "tj.cuda.set_device(local_rank)\n"
            'tj.distributed.init_process_group(backend="nccl")'
        ),
        notes=(
            "Under a launcher (`RANK`, `WORLD_SIZE` set) the first tj call that starts "
            "JAX joins the job with the launcher's settings (on a GPU host each process "
            "then starts on its own GPU only); `init_process_group` confirms them. Raw "
            "JAX calls (`jax.devices()`, creating an array) must still come after it. "
            "Left alone when `torch.distributed` runs the job."
        ),
        runs=False,
    ),
    Idiom(
        id="dist-missing-rank",
        section=SECTION,
        title="A rank that never starts",
        torch='dist.init_process_group(backend="gloo", timeout=timedelta(seconds=30))',
        jax="jax.distributed.initialize(..., initialization_timeout=30)  # SIGABRT later",
        tj='tj.distributed.init_process_group(backend="gloo", timeout=30)',
        notes=(
            "Every rank checks in with rank 0 before JAX starts; after `timeout` each "
            "rank that came raises `DistributedError` naming the ranks that never "
            "arrived (torch: `DistStoreError` in each waiting rank). A second process "
            "with the same rank and a rank with another `WORLD_SIZE` are refused at "
            "once."
        ),
        runs=False,
    ),
    Idiom(
        id="dist-ddp-replicate",
        section=SECTION,
        title="DDP(model.to(device))",
        torch="model = DDP(model.to(device), device_ids=[local_rank])",
        jax=(
            "params = jax.device_put(jax.tree.map(np.asarray, params),\n"
            "                        NamedSharding(mesh, P()))  # via the host"
        ),
        tj=(
            "tj.to_device(model, device)\n"
            "tj.to_device(model, NamedSharding(mesh, P()))  # in place for NNX"
        ),
        notes=(
            "Replicates placed arrays over a mesh that spans processes, each process "
            "supplying its own devices' replicas from where the arrays are (plain "
            "`jax.device_put` refuses: cross-host transfer). Each process must hold the "
            "same values (DDP broadcasts rank 0's: use the same seed, or "
            "`multihost_utils.broadcast_one_to_all`). Replicas alias the source like "
            "JAX's `device_put`; `copy=True` gives fresh buffers."
        ),
        runs=False,
    ),
    Idiom(
        id="dist-gather-to-host",
        section=SECTION,
        title="Rank 0 saves a checkpoint",
        torch="if rank == 0:\n    torch.save(model.module.state_dict(), path)",
        jax=(
            "state = jax.tree.map(lambda a: a.addressable_data(0), state)  # replicated\n"
            "if jax.process_index() == 0:\n"
            "    save(state, path)"
        ),
        tj='if rank == 0:\n    tj.save_file(tj.to_device(state, "cpu"), path)',
        notes=(
            "`tj.to_device(array, device)` of a global array: a replicated one is read "
            "from this process's own replica; a split one is gathered from every "
            "process, which is a collective (every rank must call it, as for FSDP's "
            "full state dict; a rank that does not raises `DistributedError` after the "
            "timeout on the others)."
        ),
        runs=False,
    ),
    Idiom(
        id="dist-resume-onto-mesh",
        section=SECTION,
        title="Resume every rank from the checkpoint",
        torch=(
            "checkpoint = torch.load(path, map_location=device)\n"
            'model.load_state_dict(checkpoint["model"])'
        ),
        jax="# load on every process, then jax.device_put(np.asarray(...), sharding)",
        tj="weights = tj.load(path, map_location=NamedSharding(mesh, P()))",
        notes=(
            "Loads straight onto the mesh, each process reading what its devices hold "
            "(see Checkpoints: loading onto a mesh)."
        ),
        runs=False,
    ),
    Idiom(
        id="dist-mesh-axis-types",
        section=SECTION,
        title="Mesh axes for data-parallel code",
        torch='mesh = init_device_mesh("cuda", (8,), mesh_dim_names=("data",))',
        jax=(
            'mesh = jax.make_mesh((8,), ("data",),\n'
            "                     axis_types=(jax.sharding.AxisType.Auto,))"
        ),
        tj='mesh = tj.distributed.init_device_mesh("cuda", (8,), mesh_dim_names=("data",))',
        notes=(
            "`Auto` axes by default, so single-device code (an embedding lookup) runs "
            "over a split batch under `jit`; `jax.make_mesh` defaults to `Explicit` "
            "axes, where it fails with `ShardingTypeError`. "
            "`axis_types=AxisType.Explicit` asks for JAX's explicit mode."
        ),
        runs=False,
    ),
    Idiom(
        id="dist-ddp-port",
        section=SECTION,
        title="A DDP trainer, ported",
        torch=(
            "model = DDP(GPT(config).to(device), device_ids=[local_rank])\n"
            "loss = model(x, y)\n"
            "loss.backward()\n"
            "optimizer.step()"
        ),
        jax="# the rows above, with the workarounds their jax columns show",
        tj=(
            "tj.to_device(model, device)\n"
            "tj.to_device(model, NamedSharding(mesh, P()))\n"
            'batch = tj.distributed.make_global_batch({"x": x, "y": y}, mesh)\n'
            "loss = train_step(model, optimizer, batch)  # nnx.jit: grads averaged"
        ),
        notes=(
            "`examples/gpt_ddp_port.py` ports the nanoGPT-shaped `gpt_ddp_torch.py` "
            "(embeddings, attention, AdamW via optax, gradient accumulation, rank-0 "
            "save, resume): on 2 processes x 2 devices its losses match the PyTorch "
            "DDP original and the one-process run on the same global batch."
        ),
        runs=False,
    ),
    Idiom(
        id="dist-env",
        section=SECTION,
        title="The launcher's variables",
        torch='rank = int(os.environ["RANK"])\nworld_size = int(os.environ["WORLD_SIZE"])',
        jax="rank, world_size = jax.process_index(), jax.process_count()",
        tj="rank, world_size = tj.distributed.get_rank(), tj.distributed.get_world_size()",
        notes=(
            'After `init_process_group`. `"RANK" in os.environ` keeps working: torchrun and '
            "`torch2jax-device run` both set it. `MASTER_ADDR`/`MASTER_PORT` are read by "
            "`init_process_group`; SLURM's variables by `jax.distributed.initialize()`. "
            "`scan` follows the names through a loop over a table of alternatives "
            '(`for v in ("LOCAL_RANK", "SLURM_LOCALID"): os.environ[v]`) and a dict '
            "written at once (`os.environ.update(env_vars)`)."
        ),
        runs=False,
        torch_api=("os.environ",),
        tj_api=("tj.distributed.get_rank", "tj.distributed.get_world_size"),
        rewrite="custom",
    ),
    Idiom(
        id="dist-is-initialized",
        section=SECTION,
        title="Has this process joined a job?",
        torch="joined = torch.distributed.is_initialized()",
        jax="# no public equivalent",
        tj="joined = tj.distributed.is_initialized()",
        result="joined",
        torch_api=("torch.distributed.is_initialized",),
        tj_api=("tj.distributed.is_initialized",),
        rewrite="rename",
    ),
    Idiom(
        id="dist-data-parallel",
        section=SECTION,
        title="One process, every local GPU (DataParallel)",
        torch="model = torch.nn.DataParallel(model)\ny = model(x)",
        jax=(
            'mesh = jax.make_mesh((jax.local_device_count(),), ("data",))\n'
            'y = jax.jit(forward)(params, jax.device_put(x, NamedSharding(mesh, P("data"))))'
        ),
        tj=(
            'mesh = jax.make_mesh((jax.local_device_count(),), ("data",))\n'
            'y = jax.jit(forward)(params, tj.to_device(x, NamedSharding(mesh, P("data"))))'
        ),
        notes=(
            "One process driving every local GPU is JAX's preferred layout: parameters "
            "replicated (`NamedSharding(mesh, P())`), the batch split over the mesh, the "
            "step under `jax.jit`. No wrapper, so no `.module`."
        ),
        runs=False,
        torch_api=(
            "torch.nn.DataParallel",
            "torch.nn.parallel.DataParallel",
            "torch.nn.parallel.data_parallel",
            "torch.nn.parallel.*",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="mp-spawn",
        section=SECTION,
        title="Start the workers from the script (mp.spawn)",
        torch="mp.spawn(main_worker, nprocs=world_size, args=(world_size,))",
        jax="# start each process yourself; each calls jax.distributed.initialize() first",
        tj=(
            "# torch2jax-device run --nproc-per-node N train.py, and in train.py:\n"
            "main_worker(tj.distributed.get_local_rank(), world_size)"
        ),
        notes=(
            "Each JAX process must join the job before it starts JAX, with a rank given "
            "from outside: launch the script N times (`torch2jax-device run` or torchrun) "
            "and call the worker directly. On one host, one process driving every GPU "
            'with a mesh needs no launcher at all. `mp.set_start_method("spawn")` (and '
            "the `get_start_method()` test before it) is there because CUDA cannot be used "
            "in a forked child; neither can JAX: keep `spawn` for worker processes that "
            "touch JAX."
            " `model.share_memory()` before starting workers has no counterpart (JAX's arrays "
            "are not shared with other processes: each worker loads the model), and Python's own "
            '`multiprocessing.get_context("spawn")` / `set_start_method("spawn")` in a torch '
            "script stay, as torch's do."
        ),
        runs=False,
        torch_api=(
            "torch.multiprocessing.spawn",
            "torch.multiprocessing.start_processes",
            "torch.multiprocessing.set_start_method",  # spawn, because CUDA cannot fork
            "torch.multiprocessing.get_start_method",
            "torch_xla.distributed.xla_multiprocessing.spawn",
            "torch_xla.launch",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="ddp-module",
        section=SECTION,
        title="The model inside the DDP wrapper",
        torch="raw_model = model.module",
        jax="raw_model = model  # no wrapper",
        tj="raw_model = model  # no wrapper in JAX: the module is the model",
        notes=(
            "Applies to `DataParallel(...).module` too, to `self.module` in a subclass of "
            "either, and to `x.module` read where the code handles a wrapped and a bare "
            'model (`if hasattr(x, "module")`, a `try` whose `except` reads `x`). A state '
            'dict saved through the wrapper has keys starting `"module."`: keep the code '
            "that strips them for checkpoints torch wrote; a JAX model's state has none."
        ),
        runs=False,
        torch_api=("DistributedDataParallel.module", "DataParallel.module"),
        rewrite="custom",
    ),
    Idiom(
        id="ddp-no-sync",
        section=SECTION,
        title="Gradient accumulation without syncing",
        torch="with model.no_sync():\n    loss_fn(model(x), y).backward()",
        jax="grads = jax.tree.map(jnp.add, grads, jax.grad(loss_fn)(params, batch))",
        tj="grads = jax.tree.map(jnp.add, grads, jax.grad(loss_fn)(params, batch))",
        notes=(
            "DDP skips its all-reduce on the micro-steps. Under `jax.jit` with a global "
            "batch, accumulate gradients (or `optax.MultiSteps`) and apply them once; "
            "`model.require_backward_grad_sync = ...` and FSDP2's "
            "`model.set_requires_gradient_sync(False)` likewise."
        ),
        runs=False,
        torch_api=(
            "DistributedDataParallel.no_sync",
            "DistributedDataParallel.require_backward_grad_sync",
            "FSDPModule.set_requires_gradient_sync",
        ),
        rewrite="custom",
    ),
    Idiom(
        id="sync-batchnorm",
        section=SECTION,
        title="Batch statistics over every rank",
        torch="model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)",
        jax="# a batch sharded over the mesh: jitted BatchNorm statistics are already global",
        tj="# a batch sharded over the mesh: jitted BatchNorm statistics are already global",
        notes=(
            "Under `jax.jit`, `nnx.BatchNorm` on a global batch (`make_global_batch`) "
            "averages over all of it, as `SyncBatchNorm` does across ranks."
        ),
        runs=False,
        torch_api=(
            "torch.nn.SyncBatchNorm",
            "torch.nn.SyncBatchNorm.convert_sync_batchnorm",
            "apex.parallel.SyncBatchNorm",
            "apex.parallel.convert_syncbn_model",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="ddp-batch-statistics",
        section=SECTION,
        title="BatchNorm under DDP: each rank's own statistics",
        torch="model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8)))",
        jax=(
            "# nnx.BatchNorm over a global batch normalizes with every rank's rows\n"
            "# (SyncBatchNorm); per rank: normalize each rank's rows with their own statistics"
        ),
        tj=(
            "# a global batch (tj.distributed.make_global_batch): nnx.BatchNorm is SyncBatchNorm;\n"
            "# DDP's plain BatchNorm is per rank: PerRankBatchNorm (docs/how-to/ddp.md)"
        ),
        notes=(
            "DDP's forward sees one rank's rows, so a plain `BatchNorm` normalizes each "
            "rank's rows with their own mean and variance, and DDP broadcasts rank 0's "
            "running statistics before each forward. The port's step sees every rank's "
            "rows at once, where `nnx.BatchNorm` computes `SyncBatchNorm`'s statistics: "
            "losses differ (12% in the trainer oracle's case) unless the layer keeps "
            "per-rank statistics (`PerRankBatchNorm` on the DDP page) or the script meant "
            "`convert_sync_batchnorm`. `scan` reports a BatchNorm layer in a file that wraps "
            "a model in DDP and converts nothing to `SyncBatchNorm`."
        ),
        runs=False,
        torch_api=(
            "torch.nn.BatchNorm1d",
            "torch.nn.BatchNorm2d",
            "torch.nn.BatchNorm3d",
            "torch.nn.LazyBatchNorm1d",
            "torch.nn.LazyBatchNorm2d",
            "torch.nn.LazyBatchNorm3d",
        ),
        rewrite="custom",
    ),
    Idiom(
        id="ddp-summed-loss",
        section=SECTION,
        title="A summed loss under DDP",
        torch=(
            "model = DDP(model)\n"
            'loss = torch.nn.functional.cross_entropy(model(x), y, reduction="sum")'
        ),
        jax="loss = per_row_losses.sum() / jax.process_count()  # DDP averages the ranks' sums",
        tj="loss = per_row_losses.sum() / tj.distributed.get_world_size()  # DDP's average",
        notes=(
            "DDP averages the ranks' gradients, so a per-rank sum's gradient is the "
            "global sum's divided by the world size. The port's step sums every rank's "
            "rows at once: divide by `tj.distributed.get_world_size()` to train as DDP does "
            '(the trainer oracle\'s `summed-loss` case). `scan` reports `reduction="sum"` '
            "on a torch loss in a file that wraps a model in DDP."
        ),
        runs=False,
        torch_api=(
            "torch.nn.functional.cross_entropy",
            "torch.nn.functional.nll_loss",
            "torch.nn.functional.mse_loss",
            "torch.nn.functional.l1_loss",
            "torch.nn.functional.binary_cross_entropy_with_logits",
            "torch.nn.CrossEntropyLoss",
            "torch.nn.NLLLoss",
            "torch.nn.MSELoss",
            "torch.nn.L1Loss",
            "torch.nn.BCEWithLogitsLoss",
        ),
        rewrite="custom",
    ),
    Idiom(
        id="dtensor-full-tensor",
        section=SECTION,
        title="Gather a sharded tensor whole",
        torch="full = weight.full_tensor()",
        jax="full = multihost_utils.process_allgather(weight, tiled=True)",
        tj="full = multihost_utils.process_allgather(weight, tiled=True)",
        notes=(
            "A `DTensor` (FSDP2, tensor parallelism) is a `jax.Array` sharded over a mesh. "
            'In one process, `jax.device_get(weight)` or `tj.to_device(weight, "cpu")` '
            "gathers it; across processes `process_allgather(..., tiled=True)` does. "
            "Inside a jitted step, `jax.lax.with_sharding_constraint(x, "
            "NamedSharding(mesh, P()))` replicates it instead."
        ),
        runs=False,
        torch_api=("DTensor.full_tensor",),
        rewrite="advice",
    ),
    Idiom(
        id="dist-mesh-queries",
        section=SECTION,
        title="Ranks and sizes along a DeviceMesh's dimensions",
        torch=(
            'mesh = init_device_mesh("cuda", (2, 4), mesh_dim_names=("dp", "tp"))\n'
            'tp_rank, tp_size = mesh.get_local_rank("tp"), mesh.size(1)'
        ),
        jax='tp_size = mesh.shape["tp"]  # mesh = jax.make_mesh((2, 4), ("dp", "tp"))',
        tj='tp_size = mesh.shape["tp"]  # tp_rank: jax.lax.axis_index("tp") inside shard_map',
        notes=(
            "A `jax.sharding.Mesh` is a grid of devices, not a process's position in one: "
            "sizes are `mesh.shape[name]` (`mesh.size` is the number of devices), the "
            "process's rank is `tj.distributed.get_rank()`, and a position along an axis "
            "is `jax.lax.axis_index(name)` inside `shard_map`, where each device computes "
            "its part. `get_group(dim)` has no counterpart: collectives name the axis. "
            "`mesh.mesh_dim_names` is a JAX mesh's `axis_names`."
        ),
        runs=False,
        torch_api=(
            "DeviceMesh.get_local_rank",
            "DeviceMesh.get_rank",
            "DeviceMesh.size",
            "DeviceMesh.get_group",
            "DeviceMesh.get_coordinate",
            "DeviceMesh.mesh_dim_names",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="dist-fsdp",
        section=SECTION,
        title="Shard the parameters over the ranks (FSDP)",
        torch=(
            "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
            "model = FSDP(model, use_orig_params=True)"
        ),
        jax=FSDP_JAX,
        tj=FSDP_TJ,
        notes=(
            "FSDP (`FullyShardedDataParallel`, FSDP2's `fully_shard`) keeps a shard of each "
            "parameter per rank and gathers it for the layer that needs it. In JAX a "
            "parameter sharded over a mesh axis is one global array: under `jax.jit` XLA "
            "gathers it where the computation needs it and reduces the gradients back to "
            "their shards. Shard the leaves whose first dimension divides by the axis "
            "size, replicate the rest; the batch goes over the same axis "
            "(`make_global_batch`). `MixedPrecision` is the parameters' and inputs' "
            "dtypes, `CPUOffload` pinned host memory (`tj.DeviceMap`), and the wrap "
            "policies have no counterpart: XLA schedules the gathers itself."
        ),
        runs=False,
        torch_api=(
            "torch.distributed.fsdp.FullyShardedDataParallel",
            "torch.distributed.fsdp.fully_shard",
            "torch.distributed._composable.fsdp.fully_shard",
            "torch.distributed.fsdp.FSDPModule",
            "torch.distributed.fsdp.ShardingStrategy",
            "torch.distributed.fsdp.MixedPrecision",
            "torch.distributed.fsdp.MixedPrecisionPolicy",
            "torch.distributed.fsdp.CPUOffload",
            "torch.distributed.fsdp.BackwardPrefetch",
            "torch.distributed.fsdp.wrap.transformer_auto_wrap_policy",
            "torch.distributed.fsdp.wrap.size_based_auto_wrap_policy",
            "torch.distributed.fsdp.wrap.ModuleWrapPolicy",
            "torch.distributed.fsdp.wrap.wrap",
            "torch.distributed.fsdp.wrap.enable_wrap",
            "torch_xla.distributed.fsdp.XlaFullyShardedDataParallel",
            "torch_xla.distributed.fsdp.checkpoint_module",
            # Lightning's XLA FSDP strategy's wrapper of each block (litgpt calls it
            # through a name: wrap = partial(_activation_checkpointing_auto_wrapper, ...))
            "lightning.fabric.strategies._activation_checkpointing_auto_wrapper",
            # the rest of FSDP (ShardingStrategy.NO_SHARD, FSDP.fsdp_modules, its runtime's
            # _reshard, FSDP2's CPUOffloadPolicy): one row, not dist-other's collectives
            "torch.distributed.fsdp.*",
            "torch.distributed._composable.fsdp.*",
            # FSDP's own storage helpers, kept in torch.distributed.utils: a flat
            # parameter's memory freed or reallocated by hand (Wan2.1's free_model)
            "torch.distributed.utils._free_storage",
            "torch.distributed.utils._alloc_storage",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="dist-elastic-record",
        section=SECTION,
        title="Report a worker's error to the launcher (@record)",
        torch=(
            "from torch.distributed.elastic.multiprocessing.errors import record\n"
            "@record\n"
            "def main():\n"
            "    ..."
        ),
        jax="def main():  # a failed process ends the job with its traceback\n    ...",
        tj=(
            "def main():  # nothing needed: torch2jax-device run prints a failed rank's error\n"
            "    ..."
        ),
        notes=(
            "`@record` writes the worker's exception to a file torchrun's agent reads. "
            "Under `torch2jax-device run` a rank that fails ends the job, and its "
            "traceback is printed with the rank; torchrun keeps doing what it did, so the "
            "decorator can stay while torch is installed. It neither needs nor holds "
            "torch's process group or current device (it works in a process that never "
            "joins one), so it is no reason to keep the file's other torch.distributed "
            "calls torch's."
        ),
        runs=False,
        torch_api=("torch.distributed.elastic.multiprocessing.errors.record",),
        rewrite="advice",
    ),
    Idiom(
        id="dist-checkpoint-state",
        section=SECTION,
        title="Distributed checkpoint state: Stateful, full state dicts",
        torch=(
            "from torch.distributed.fsdp import FullStateDictConfig, StateDictType\n"
            "config = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)\n"
            "with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, config):\n"
            "    state = model.state_dict()"
        ),
        jax="# orbax.checkpoint saves sharded arrays as they are; or gather, then save",
        tj='state = tj.state_dict(tj.to_device(model, "cpu"))  # or orbax for sharded state',
        notes=(
            "FSDP's `FullStateDictConfig` / `StateDictType`, DCP's `Stateful` base class "
            "(`state_dict` / `load_state_dict` for `dcp.save`) and `get_state_dict` "
            "decide how sharded state becomes a checkpoint. With JAX the model holds "
            "global arrays: `tj.state_dict(model)` names them as torch does (moved to the "
            "host first for a full, gathered copy: a collective, every process calls "
            "it), and orbax.checkpoint saves and restores sharded arrays without "
            "gathering. An object with state of its own (a step counter, a data "
            "position) goes in the same dictionary."
        ),
        runs=False,
        torch_api=(
            "torch.distributed.fsdp.FullyShardedDataParallel.optim_state_dict",
            "torch.distributed.fsdp.FullyShardedDataParallel.optim_state_dict_to_load",
            "torch.distributed.fsdp.FullyShardedDataParallel.full_optim_state_dict",
            "torch.distributed.fsdp.FullyShardedDataParallel.set_state_dict_type",
            "torch.distributed.checkpoint.stateful.Stateful",
            "torch.distributed.checkpoint.Stateful",
            "torch.distributed.fsdp.FullStateDictConfig",
            "torch.distributed.fsdp.FullOptimStateDictConfig",
            "torch.distributed.fsdp.ShardedStateDictConfig",
            "torch.distributed.fsdp.ShardedOptimStateDictConfig",
            "torch.distributed.fsdp.StateDictType",
            "torch.distributed.fsdp.FullyShardedDataParallel.state_dict_type",
            "torch.distributed.checkpoint.state_dict.get_state_dict",
            "torch.distributed.checkpoint.state_dict.get_model_state_dict",
            "torch.distributed.checkpoint.state_dict.set_state_dict",
            "torch.distributed.checkpoint.save",
            "torch.distributed.checkpoint.load",
            # the rest of DCP (StateDictOptions, get/set_optimizer_state_dict, the
            # planners and storage readers): one row, not dist-other's collectives
            "torch.distributed.checkpoint.*",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="dist-other",
        section=SECTION,
        title="Other collectives and process-group calls",
        torch=(
            "gathered = [torch.zeros_like(t) for _ in range(world_size)]\n"
            "dist.all_gather(gathered, t)"
        ),
        jax="gathered = list(multihost_utils.process_allgather(t))",
        tj="gathered = list(multihost_utils.process_allgather(t))",
        notes=(
            "`scan` gives the collective the line calls, with its arguments: "
            "`dist.all_gather(out, t)` is `out = list(multihost_utils.process_allgather(t))` "
            "(one array per process, as torch's list), `dist.broadcast(t, src)` is "
            "`t = multihost_utils.broadcast_one_to_all(t, is_source=jax.process_index() == "
            "src)`. "
            "`tj.distributed` has `init_process_group`, ranks, `barrier`, `all_reduce` of "
            "host values and device meshes. Other collectives: "
            "`jax.experimental.multihost_utils` (`process_allgather`, "
            "`broadcast_one_to_all`) between processes, `jax.lax` collectives inside "
            "`shard_map`."
            " An asynchronous collective's work waited for (`work = dist.all_gather(out, x, "
            "async_op=True)`, then `work.wait()`) has nothing to wait for: JAX's collectives "
            "hand back their result, and `jax.block_until_ready(x)` waits for an array."
        ),
        runs=False,
        torch_api=("torch.distributed.*",),
        rewrite="advice",
    ),
)
