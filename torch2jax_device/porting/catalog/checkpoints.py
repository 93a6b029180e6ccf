"""Catalog rows, section "Checkpoints": safetensors and torch.load onto a chosen device."""

from __future__ import annotations

from ..idiom import Idiom

SECTION = "Checkpoints"
# torch.optim.lr_scheduler's classes that tj.optim.lr_scheduler ports by torch's own rule.
_SCHEDULERS = (
    "StepLR",
    "MultiStepLR",
    "CosineAnnealingLR",
    "LinearLR",
    "LambdaLR",
    "ExponentialLR",
    "ConstantLR",
    "PolynomialLR",
    "OneCycleLR",
    "ReduceLROnPlateau",
)

ROWS: tuple[Idiom, ...] = (
    Idiom(
        id="load-safetensors",
        section=SECTION,
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
            "`tj.device` takes. On the CPU the file is memory-mapped as `safetensors.torch` "
            "maps it: tensors that start 64-byte aligned (all of them in files `tj.save_file` "
            "writes) are arrays over the mapping, in O(1) time, RAM growing as pages are "
            "read; others are read once (`safetensors.flax` needs 3x the file in RAM, "
            "`safetensors.numpy` 2x). Onto a GPU through a bounded staging buffer. Every "
            "dtype, BF16 and FP8 included, without import-order tricks; the packed F4/F6 "
            "kinds are refused, and so are files of more tiny tensors than `max_tensors=`. "
            "Names come in the file's order, as in `safetensors.torch`."
        ),
        runs=False,
        torch_api=(
            "safetensors.torch.load_file",
            "safetensors.numpy.load_file",
            "safetensors.flax.load_file",
        ),
        tj_api=("tj.load_file", "tj.load_file", "tj.load_file"),
        rewrite="rename",
    ),
    Idiom(
        id="load-safetensors-default-device",
        section=SECTION,
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
        section=SECTION,
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
            "`framework=` is accepted as written and ignored: results are JAX arrays on "
            "`device=` (the CPU by default). On the CPU an aligned contiguous window is an "
            "array over the mapped file; otherwise only the bytes the index selects are "
            "read. Basic indices only (ints, slices, `...`, `None`; negative steps work); "
            "safetensors reads the whole tensor for list or tensor indices."
        ),
        runs=False,
        torch_api=("safetensors.safe_open",),
        rewrite="advice",
    ),
    Idiom(
        id="save-safetensors",
        section=SECTION,
        title="Save arrays to a safetensors file",
        torch="safetensors.torch.save_file(tensors, path, metadata)",
        jax="safetensors.flax.save_file(tensors, path, metadata)",
        tj="tj.save_file(tensors, path, metadata)",
        notes=(
            "JAX, NumPy and torch values, mixed. Atomic: a temporary file, flushed, then "
            "renamed (an existing file keeps its mode; links are followed, devices refused). "
            "The layout is 64-byte aligned (header padded with spaces, tensors ordered), "
            "so CPU loads map it without copies; safetensors reads it unchanged. Tensors "
            "sharing memory are written in full (`safetensors.torch` refuses them)."
        ),
        runs=False,
        torch_api=(
            "safetensors.torch.save_file",
            "safetensors.numpy.save_file",
            "safetensors.flax.save_file",
        ),
        tj_api=("tj.save_file", "tj.save_file", "tj.save_file"),
        rewrite="rename",
    ),
    Idiom(
        id="torch-load",
        section=SECTION,
        title="Load a PyTorch checkpoint",
        torch="checkpoint = torch.load(path)",
        jax="# torch.load(path), then jax.dlpack.from_dlpack(t) for every tensor in it",
        tj="checkpoint = tj.load(path)",
        notes=(
            "Always `weights_only=True`: nothing in the file runs. Tensors become JAX arrays "
            "without copies where the memory allows; other entries are kept. Without "
            "`map_location` tensors go where they were saved: a `cuda:0` checkpoint on a "
            "machine without that GPU raises `tj.DeviceUnavailableError` (a `RuntimeError`, "
            "like torch's error). `.safetensors` files load too. A checkpoint of more "
            "tensors than `max_tensors=` allows (each view counts: it becomes an array) is "
            "refused; the default is one per 4 KiB of file, at least 16,384."
        ),
        runs=False,
        torch_api=("torch.load",),
        tj_api=("tj.load",),
        rewrite="custom",
    ),
    Idiom(
        id="torch-load-map-location",
        section=SECTION,
        title="Load a checkpoint onto a device",
        torch='checkpoint = torch.load(path, map_location="cpu")',
        jax="# torch.load(path, map_location='cpu'), then jax.device_put per tensor",
        tj='checkpoint = tj.load(path, map_location="cpu")',
        notes=(
            "Also a `torch.device`, `tj.device` or `jax.Device`. torch fails on "
            "`torch.device('cpu', 0)` (it has no restorer for 'cpu:0'); tj places on cpu:0."
        ),
        runs=False,
        torch_api=("torch.load",),
        tj_api=("tj.load",),
        rewrite="custom",
    ),
    Idiom(
        id="torch-load-map-location-dict",
        section=SECTION,
        title="Remap saved locations",
        torch='checkpoint = torch.load(path, map_location={"cuda:0": "cpu"})',
        jax="# no equivalent",
        tj='checkpoint = tj.load(path, map_location={"cuda:0": "cpu"})',
        notes=(
            "Saved locations the dict does not list stay where they were saved. A "
            "safetensors file counts as saved on `cpu`."
        ),
        runs=False,
        torch_api=("torch.load",),
        tj_api=("tj.load",),
        rewrite="custom",
    ),
    Idiom(
        id="torch-load-map-location-callable",
        section=SECTION,
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
        torch_api=("torch.load",),
        tj_api=("tj.load",),
        rewrite="custom",
    ),
    Idiom(
        id="load-onto-mesh",
        section=SECTION,
        title="Load onto a mesh, each process its parts",
        torch=(
            "state = safetensors.torch.load_file(path)  # every byte, every rank\n"
            'weight = distribute_tensor(state["wte.weight"], mesh, [Shard(0)])'
        ),
        jax=(
            "with safe_open(path, 'flax') as f:  # read the rows yourself, per device\n"
            '    part = f.get_slice("wte.weight")[start:stop]'
        ),
        tj=(
            'rule = tj.ShardingRule(mesh, {"*.weight": P("model", None)})\n'
            "state = tj.load_file(path, device=rule)"
        ),
        notes=(
            "`device=` (and `tj.safe_open`'s, and `tj.load`'s `map_location=`) also "
            "takes a `Sharding`, a `Mesh` (replicated) or a per-tensor rule: a "
            "`tj.ShardingRule` of name patterns to `PartitionSpec`, or a function "
            "`(name, shape, dtype) -> Sharding`. Each process reads only the parts its "
            "devices hold (one read per row range) and no device holds a whole "
            "tensor meant to be split. PyTorch checkpoints through "
            "`torch.load(mmap=True)`."
        ),
        runs=False,
    ),
    Idiom(
        id="load-index-of-shards",
        section=SECTION,
        title="A checkpoint split over several files",
        torch=(
            'index = json.load(open("model.safetensors.index.json"))\n'
            "state = {}\n"
            'for file in set(index["weight_map"].values()):\n'
            "    state.update(safetensors.torch.load_file(file))"
        ),
        jax="# the same loop with safetensors.flax.load_file",
        tj='state = tj.load_file("model.safetensors.index.json", device=rule)',
        notes=(
            "`tj.load_file` and `tj.load` read Hugging Face index files "
            "(`*.index.json` with a `weight_map`), of safetensors or PyTorch shards, "
            "onto any target; shard files must sit next to the index."
        ),
        runs=False,
    ),
    Idiom(
        id="torch-save",
        section=SECTION,
        title="Save a model and its step",
        torch='torch.save({"model": model.state_dict(), "step": step}, "ckpt.pt")',
        jax=(
            "state = nnx.to_pure_dict(nnx.state(model, nnx.Not(nnx.RngState)))\n"
            "flat = {'.'.join(map(str, k)): v "
            "for k, v in flax.traverse_util.flatten_dict(state).items()}\n"
            'safetensors.flax.save_file(flat, "model.safetensors", {"step": str(step)})'
        ),
        tj='tj.save_file(model, "model.safetensors", {"step": str(step)})',
        notes=(
            "safetensors holds arrays and string metadata, never pickled objects: keep "
            "the step and settings in the metadata. `tj.save_file` names the model's arrays "
            "as `tj.state_dict` does (`layers.0.kernel` in an `nnx.Sequential`) and leaves "
            "RNG state out (a `Dropout`'s key, which no state dict holds). Back: "
            '`model = tj.load_state(model, "model.safetensors")`, the step from '
            "`tj.safe_open(path).metadata()`. For the torch original to read: "
            '`torch.save({"model": tj.state_dict(model, layout="torch"), "step": step}, '
            '"ckpt.pt")` (torch tensors, torch\'s names and layouts).'
        ),
        runs=False,
        torch_api=("torch.save",),
        rewrite="advice",
    ),
    Idiom(
        id="torch-load-file-object",
        section=SECTION,
        title="Load a checkpoint from a file object",
        torch="checkpoint = torch.load(io.BytesIO(data))",
        jax="# torch.load(io.BytesIO(data)), then jax.dlpack.from_dlpack for every tensor",
        tj="checkpoint = tj.load(io.BytesIO(data))",
        notes=(
            "Any binary file object with `read`, `seek` and `tell` (`open(path, 'rb')`, "
            "`io.BytesIO`), read from its current position, as in torch. Text-mode, closed "
            "and unseekable files raise `tj.CheckpointError` saying what to pass instead. "
            "Safetensors files need a path."
        ),
        runs=False,
    ),
    Idiom(
        id="torch-load-weights-only",
        section=SECTION,
        title="Load weights only",
        torch="checkpoint = torch.load(path, weights_only=True)",
        jax="# torch.load(path, weights_only=True), then convert every tensor",
        tj="checkpoint = tj.load(path, weights_only=True)",
        notes=(
            "`True` (or `None`) is all tj takes: nothing in the file runs. "
            "`weights_only=False` raises `tj.UnsupportedOperationError` with the safe way: "
            "allowlist the classes you trust with `torch.serialization.add_safe_globals`."
        ),
        runs=False,
    ),
    Idiom(
        id="torch-load-mmap",
        section=SECTION,
        title="Memory-map a checkpoint",
        torch="checkpoint = torch.load(path, mmap=True)",
        jax="# torch.load(path, mmap=True), then jax.dlpack.from_dlpack for every tensor",
        tj="checkpoint = tj.load(path, mmap=True)",
        notes=(
            "On the CPU the arrays use the mapped file in place: pages are read when first "
            "touched, and RAM holds only those. As in torch, a path to a zip checkpoint "
            "(the format since torch 1.6) only; do not change the file while the arrays live."
        ),
        runs=False,
    ),
    Idiom(
        id="torch-load-map-location-invalid",
        section=SECTION,
        title="map_location forms torch refuses",
        torch=(
            "torch.load(path, map_location=0)  # TypeError\n"
            'torch.load(path, map_location={"cuda:0": torch.device("cpu")})  # TypeError'
        ),
        jax="# no equivalent",
        tj=(
            "tj.load(path, map_location=0)  # tj.DeviceTypeError, a TypeError\n"
            'tj.load(path, map_location={"cuda:0": "cpu"})  # dict values are strings'
        ),
        notes=(
            "An int, a dict whose values are not strings, or a callable returning anything "
            "but a storage or `None`: `tj.DeviceTypeError` (a `TypeError`, as torch raises), "
            "saying what to write. tj checks before reading the file; torch at the first "
            "tensor it places."
        ),
        runs=False,
    ),
    Idiom(
        id="torch-load-state-dict-metadata",
        section=SECTION,
        title="Containers load as saved",
        torch="state = torch.load(path)  # state._metadata: BatchNorm versions",
        jax="# torch.load(path), then convert tensors without losing containers' attributes",
        tj="state = tj.load(path)  # state._metadata kept",
        notes=(
            "Containers keep their type and attributes (a state dict's `_metadata`); shared "
            "objects stay shared (a tensor saved twice is one array) and self-references and "
            "nesting of any depth load as saved. Tensors as dict keys or set elements are "
            "refused (JAX arrays cannot be hashed)."
        ),
        runs=False,
    ),
    Idiom(
        id="torch-load-sparse-quantized",
        section=SECTION,
        title="Sparse and quantized tensors",
        torch=(
            'adjacency = torch.load(path)["adjacency"].to_dense()\n'
            'weight = torch.load(path)["qweight"].dequantize()'
        ),
        jax="# torch.load, .to_dense() / .dequantize(), then convert",
        tj=(
            'adjacency = tj.load(path)["adjacency"]  # dense\n'
            'weight = tj.load(path)["qweight"]  # dequantized, float32'
        ),
        notes=(
            "JAX has neither: sparse tensors (COO, CSR, CSC, BSR, BSC) load dense, quantized "
            "ones dequantized. Meta, nested and `complex32` tensors raise `tj.CheckpointError` "
            "naming their place in the checkpoint. Copies beyond the file's data (dense "
            "sparse tensors, views repeating data) are capped at 1 GiB plus 4x that data."
        ),
        runs=False,
    ),
    Idiom(
        id="save-model-safetensors",
        section=SECTION,
        title="Save a model's weights",
        torch='safetensors.torch.save_file(model.state_dict(), "model.safetensors")',
        jax=(
            "flat = nnx.to_flat_state(nnx.state(model, nnx.Param))\n"
            "safetensors.flax.save_file(\n"
            "    {'.'.join(map(str, path)): v[...] for path, v in flat}, 'model.safetensors')"
        ),
        tj='tj.save_file(model, "model.safetensors")',
        notes=(
            "A Flax NNX module (or its `nnx.State`) or an Equinox module, by readable names "
            "(`layers.0.kernel`): every array variable except RNG state and sown "
            "intermediates. `tj.state_dict(model)` gives the same dict."
        ),
        runs=False,
    ),
    Idiom(
        id="load-model-state",
        section=SECTION,
        title="Load saved weights into a model",
        torch="model.load_state_dict(torch.load(path))",
        jax="# rebuild an nnx.State from the file, then nnx.update(model, state)",
        tj="model = tj.load_state(model, path)",
        notes=(
            "A safetensors or `.pt` file, or a dict, in the model's own names or a PyTorch "
            "twin's (transposed back). Strict, as `load_state_dict`: missing and unexpected "
            "names raise `tj.CheckpointError` listing them. Arrays take the model's dtypes "
            "and placement. NNX modules change in place; Equinox modules are new. "
            "`model.load_state_dict(tj.load(path))` does not work: an NNX module has no "
            "`load_state_dict`."
        ),
        runs=False,
        torch_api=("torch.nn.Module.load_state_dict",),
        tj_api=("tj.load_state",),
        rewrite="custom",
    ),
    Idiom(
        id="save-model-torch-twin",
        section=SECTION,
        title="Hand weights to a PyTorch twin",
        torch='torch.save(model.state_dict(), "model.pt")',
        jax="# rename kernel -> weight and transpose every layer by hand",
        tj=(
            'torch.save(tj.state_dict(model, layout="torch"), "model.pt")\n'
            'tj.save_file(model, "model.safetensors")  # for JAX alone: the model\'s own names'
        ),
        notes=(
            "`twin.load_state_dict(torch.load('model.pt'))` then loads it: Linear kernels "
            "(in, out) become weights (out, in), Conv kernels (*window, in, out) become "
            "(out, in, *window), `scale` becomes `weight`, BatchNorm's `mean`/`var` "
            "`running_mean`/`running_var`, and `nnx.Sequential`'s `layers.` is dropped. "
            "To keep the weights for JAX alone, `tj.save_file(model, path)` writes the "
            "model's own names (`tj.load_state` reads both)."
        ),
        runs=False,
        torch_api=("Module.state_dict",),
        tj_api=("tj.state_dict", "tj.save_file"),
        rewrite="custom",
    ),
    Idiom(
        id="load-safetensors-backend",
        section=SECTION,
        title="Read a file instead of mapping it",
        torch='tensors = safetensors.torch.load_file(path, backend="pread")',
        jax='tensors = safetensors.flax.load_file(path, backend="pread")',
        tj='tensors = tj.load_file(path, backend="pread")',
        notes=(
            "A mapped load shows the file as it is when pages are first read: a file "
            "rewritten in place (as `safetensors.torch.save_file` writes) changes the "
            "arrays, and a truncated one crashes the process with `SIGBUS` when they are "
            'read. `backend="pread"` reads every tensor into memory the arrays own. '
            "Replacing the file (`tj.save_file`, `torch.save`) is safe either way."
        ),
        runs=False,
    ),
    Idiom(
        id="hub-load-state-dict",
        section=SECTION,
        title="Weights downloaded from a URL (torch.hub)",
        torch='state = torch.hub.load_state_dict_from_url(url, map_location="cpu")',
        jax="# download the file, then read it (safetensors.flax.load_file for .safetensors)",
        tj=('torch.hub.download_url_to_file(url, path)\nstate = tj.load(path, map_location="cpu")'),
        notes=(
            "`load_state_dict_from_url` downloads into torch's hub cache and calls "
            "`torch.load`: download the file the same way (or with `huggingface_hub`), "
            "then `tj.load(path, map_location=...)` reads torch's format into JAX arrays "
            "where `map_location` says. `torch.hub.load(...)` builds a torch model from "
            "a repository's code: port the model, then load its weights so."
        ),
        runs=False,
        torch_api=("torch.hub.load_state_dict_from_url", "torch.utils.model_zoo.load_url"),
        rewrite="advice",
    ),
    Idiom(
        id="optimizer-torch-rules",
        section=SECTION,
        title="An optimizer that steps as torch's does",
        torch="optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)",
        jax="optimizer = nnx.Optimizer(model, optax.sgd(lr, momentum=momentum), wrt=nnx.Param)",
        tj="optimizer = nnx.Optimizer(model, tj.optim.SGD(lr=0.1, momentum=0.9), wrt=nnx.Param)",
        notes=(
            "`tj.optim.SGD`, `Adam`, `AdamW` and `RMSprop` are optax transformations with torch's "
            "update rules (weight decay added to the gradient, dampening, a momentum "
            "buffer that starts at the first gradient, Adam's `eps` outside the square "
            "root, AdamW's decay before the step) and keep their hyperparameters in the "
            "state, where a scheduler and a checkpoint set them. They take no parameters: "
            "`nnx.Optimizer` pairs them with the model. `amsgrad`, `maximize` and torch's "
            "kernel keywords (`foreach`, `fused`, `capturable`, `differentiable`) are taken, "
            "with torch's checks. Torch's parameter groups are the one positional argument "
            '(`tj.optim.AdamW([{"params": lambda path, p: p.ndim >= 2, "weight_decay": '
            '0.1}, {"params": lambda path, p: p.ndim < 2, "weight_decay": 0.0}], '
            "lr=6e-4)`): a group's `params` selects the NNX model's parameters (a predicate "
            "or nnx filter, a list of paths, or `tj.parameters(model)`'s parameters), and "
            "`tj.optim.param_groups(optimizer)` reads and sets each group's `lr`. `scan` writes "
            "both columns from the script's own line: its optimizer, learning rate and "
            "settings, and the optax "
            "rule that updates as torch's does (`optax.adamw(1e-3, weight_decay=0.01)` for "
            "torch's `AdamW()`, whose decay default is not optax's; L2 weight decay as "
            "`optax.add_decayed_weights` before the rule; RMSprop with "
            "`eps_in_sqrt=False`), or says that optax has none (`amsgrad`, `dampening`)."
        ),
        runs=False,
        torch_api=(
            "torch.optim.SGD",
            "torch.optim.Adam",
            "torch.optim.AdamW",
            "torch.optim.RMSprop",
        ),
        tj_api=(
            "tj.optim.SGD",
            "tj.optim.Adam",
            "tj.optim.AdamW",
            "tj.optim.RMSprop",
            "tj.optim.param_groups",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="optimizer-state-dict",
        section=SECTION,
        title="Save and resume an optimizer's state",
        torch=(
            "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            'torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, '
            "path)\n"
            'optimizer.load_state_dict(torch.load(path)["optimizer"])'
        ),
        jax="# map torch's momentum_buffer / exp_avg by parameter index onto optax's state by hand",
        tj=(
            'torch.save({"model": tj.state_dict(model, layout="torch"),\n'
            '            "optimizer": tj.optim.state_dict(optimizer, model)}, path)\n'
            'tj.optim.load_state_dict(optimizer, model, tj.load(path)["optimizer"])'
        ),
        notes=(
            "Torch's own format, both ways: state keyed by the index of the parameter in "
            "the twin's `parameters()` (the model's `tj.parameters` order, which survives "
            "`nnx.clone`, `nnx.jit` and split/merge), buffers in the twin's layouts, each "
            "parameter group with its current hyperparameters (several groups numbered one "
            "after the other, each in its list's order, as torch numbers them). So a "
            "checkpoint the torch "
            "original wrote resumes the port, and the reverse. Hyperparameters are float32 "
            "in the optax state and come back as the shortest decimal of that float32. "
            "`scan` reports an optimizer made elsewhere by its name or annotation "
            "(`self.optimizer`, `optimizer: torch.optim.Optimizer`)."
        ),
        runs=False,
        torch_api=("Optimizer.state_dict", "Optimizer.load_state_dict"),
        tj_api=("tj.optim.state_dict", "tj.optim.load_state_dict"),
        rewrite="advice",
    ),
    Idiom(
        id="lr-scheduler",
        section=SECTION,
        title="Schedule the learning rate by epoch",
        torch=(
            "scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=30, gamma=0.1)\n"
            "scheduler.step()  # each epoch\n"
            'scheduler.load_state_dict(torch.load(path)["scheduler"])'
        ),
        jax="schedule = optax.exponential_decay(0.1, 30 * steps_per_epoch, 0.1, staircase=True)",
        tj=(
            "scheduler = tj.optim.lr_scheduler.StepLR(optimizer, step_size=30, gamma=0.1)\n"
            "scheduler.step()  # each epoch\n"
            'scheduler.load_state_dict(tj.load(path)["scheduler"])'
        ),
        notes=(
            "`StepLR`, `MultiStepLR`, `CosineAnnealingLR`, `LinearLR` (warm-up), "
            "`LambdaLR`, `ExponentialLR`, `ConstantLR`, `PolynomialLR`, `OneCycleLR` and "
            "`ReduceLROnPlateau` (`step(metric)`) set the learning rate held in an "
            "`nnx.Optimizer`'s state at each `step()` by torch's own rule (most scale the "
            "current rate, so a rate set by hand compounds as in torch), and their "
            "`state_dict()` is torch's, key for key, so either framework's scheduler resumes "
            "the other's, by `load_state_dict` or `last_epoch=`. With parameter groups "
            "each group has its own rate (`LambdaLR` takes a list of functions, `OneCycleLR` "
            "a list of `max_lr`, `get_last_lr()` one rate per group). "
            "`scheduler.as_schedule(steps_per_epoch)` gives torch's closed form as an optax "
            "schedule. The scan advises its optax schedule for the first five, and reports "
            "a torch scheduler's `load_state_dict(...)` (unchanged on the tj one). It also "
            "reports a scheduler it did not see made, by its name (`self.scheduler.step()`, "
            "`lr_scheduler.state_dict()`; a noise scheduler's `step(output, t, sample)` is "
            "none), torch's schedulers with no port here (`SequentialLR` is "
            "`optax.join_schedules`), and Transformers' and Diffusers' `get_scheduler` and "
            "`get_*_schedule_with_warmup`, torch `LambdaLR`s over the optimizer: the optax "
            "schedule of the same shape."
        ),
        runs=False,
        torch_api=tuple(f"torch.optim.lr_scheduler.{name}" for name in _SCHEDULERS),
        tj_api=tuple(f"tj.optim.lr_scheduler.{name}" for name in _SCHEDULERS),
        rewrite="advice",
    ),
)
