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
            "`tj.device` takes. On the CPU the file is memory-mapped as `safetensors.torch` "
            "maps it: tensors that start 64-byte aligned (all of them in files `tj.save_file` "
            "writes) are arrays over the mapping, in O(1) time, RAM growing as pages are "
            "read; others are read once (`safetensors.flax` needs 3x the file in RAM, "
            "`safetensors.numpy` 2x). Onto a GPU through a bounded staging buffer. Every "
            "dtype, BF16 and FP8 included, without import-order tricks; the packed F4/F6 "
            "kinds are refused, and so are files of more tiny tensors than `max_tensors=`."
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
)
