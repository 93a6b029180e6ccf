"""Catalog rows, section "Checkpoints": safetensors and torch.load onto a chosen device."""

from __future__ import annotations

from ..idiom import Idiom

SECTION = "Checkpoints"

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
            "`tj.device` takes. The bytes are read once into 64-byte-aligned host memory that "
            "the CPU arrays use in place (RAM about the file size; `safetensors.flax` needs "
            "3x, `safetensors.numpy` 2x). Every dtype, BF16 and FP8 included, without "
            "import-order tricks; the packed F4/F6 kinds are refused."
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
            "No `framework` argument: results are JAX arrays on `device=` (the CPU by "
            "default). Reads only the bytes the index selects. Basic indices only (ints, "
            "slices, `...`, `None`; negative steps work); safetensors reads the whole "
            "tensor for list or tensor indices."
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
            "renamed. Writes the bytes `safetensors.torch` writes; tensors sharing memory "
            "are written in full (`safetensors.torch` refuses them)."
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
            "like torch's error). `.safetensors` files load too."
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
            'flat = flax.traverse_util.flatten_dict(nnx.to_pure_dict(nnx.state(model)), sep=".")\n'
            'safetensors.flax.save_file(flat, "model.safetensors", {"step": str(step)})'
        ),
        tj=(
            'flat = flax.traverse_util.flatten_dict(nnx.to_pure_dict(nnx.state(model)), sep=".")\n'
            'tj.save_file(flat, "model.safetensors", {"step": str(step)})'
        ),
        notes=(
            "safetensors holds arrays and string metadata, never pickled objects: keep "
            "the step and settings in the metadata. Back: `tj.load_file`, "
            '`flax.traverse_util.unflatten_dict(..., sep=".")`, '
            "`nnx.update(model, ...)`. For a PyTorch `.pt`: `torch.save` of "
            "`tj.to_torch(...)` of each array (names and layouts are the model's)."
        ),
        runs=False,
        torch_api=("torch.save",),
        rewrite="advice",
    ),
)
