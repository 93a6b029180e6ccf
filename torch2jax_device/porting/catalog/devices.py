"""Catalog rows, section "Devices": torch.device: naming devices."""

from __future__ import annotations

from ..idiom import Idiom

SECTION = "Devices"

ROWS: tuple[Idiom, ...] = (
    Idiom(
        id="device-select",
        section=SECTION,
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
        torch_api=("torch.device",),
        tj_api=("tj.device",),
        rewrite="custom",
    ),
    Idiom(
        id="device-indexed",
        section=SECTION,
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
        torch_api=("torch.device",),
        tj_api=("tj.device",),
        rewrite="custom",
    ),
    Idiom(
        id="device-type-index",
        section=SECTION,
        title="Name one device by type and index",
        torch='device = torch.device("cuda", 1)',
        jax='device = jax.local_devices(backend="cuda")[1]',
        tj='device = tj.device("cuda", 1)',
        result="device",
        torch_api=("torch.device",),
        tj_api=("tj.device",),
        rewrite="custom",
    ),
    Idiom(
        id="device-accelerator-index",
        section=SECTION,
        title="An int means an index of the current accelerator",
        torch="device = torch.device(0)",
        jax="device = jax.local_devices()[0]  # the default backend, CPU included",
        tj="device = tj.device(0)",
        notes="Raises when there is no accelerator, as torch does.",
        result="device",
        torch_api=("torch.device",),
        tj_api=("tj.device",),
        rewrite="custom",
    ),
    Idiom(
        id="device-parse-error",
        section=SECTION,
        title="Malformed device strings raise",
        torch='device = torch.device("cuda:01")',
        jax="# JAX never parses 'type:index' strings",
        tj='device = tj.device("cuda:01")',
        notes="`tj.InvalidDeviceError` is a `RuntimeError`, like torch's error.",
        result="device",
    ),
    Idiom(
        id="device-jax-device",
        section=SECTION,
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
        id="device-torch-device",
        section=SECTION,
        title="One device object for torch and JAX code",
        torch="x = torch.zeros(3, device=device)",
        jax="x = jnp.zeros(3, device=jax_device)  # a jax.Device; torch needs a torch.device",
        tj=(
            "x = torch.zeros(3, device=device.torch_device)  # device = tj.device(...)\n"
            "y = jnp.zeros(3, device=device.jax_device)"
        ),
        notes=(
            "A `tj.device` is neither a `torch.device` nor a `jax.Device`: torch APIs take "
            "`device.torch_device`, JAX APIs `device.jax_device`, and `tj.to_device` takes the "
            "device itself. A JAX API given the `tj.device` raises `tj.NoSuchAttributeError` "
            "naming `.jax_device` (or JAX's own error, for `jax.device_put`); torch raises "
            "its `TypeError`."
        ),
        runs=False,
    ),
    Idiom(
        id="device-cpu-any-index",
        section=SECTION,
        title="Any CPU index is the CPU",
        torch='tensor = torch.zeros(3, device="cpu:1")',
        jax='tensor = jnp.zeros(3, device=jax.local_devices(backend="cpu")[0])',
        tj='tensor = tj.to_device(jnp.zeros(3), "cpu:1")',
        notes=(
            "torch has one CPU device and ignores the index; so does a process with one CPU "
            "device. With simulated CPU devices (`JAX_NUM_CPU_DEVICES=4`) `cpu:1` is the "
            "second one and `cpu:9` raises `tj.DeviceUnavailableError`."
        ),
        result="tensor",
    ),
    Idiom(
        id="device-type",
        section=SECTION,
        title="Name a device type",
        torch='device = torch.device("cuda")',
        jax='device = jax.local_devices(backend="cuda")[0]',
        tj='device = tj.device("cuda")',
        notes=(
            "No index: the platform's current device when the device is used "
            '(`tj.cuda.set_device` changes it), as in torch. `torch.device("cpu")` is '
            '`tj.device("cpu")`.'
        ),
        result="device",
        torch_api=("torch.device",),
        tj_api=("tj.device",),
        rewrite="custom",
    ),
    Idiom(
        id="device-from-spec",
        section=SECTION,
        title="Name a device held in a variable or a setting",
        torch="device = torch.device(args.device)",
        jax="device = jax.local_devices(backend=platform)[index]  # parse the string yourself",
        tj="device = tj.device(args.device)",
        notes=(
            'Takes what `torch.device` takes (`"cuda:1"`, `"cpu"`, an index, a '
            "`torch.device`) and a `jax.Device`; a `tj.device` is not a `torch.device`, so "
            "code that still hands it to torch keeps `torch.device`."
        ),
        runs=False,
        torch_api=("torch.device",),
        tj_api=("tj.device",),
        rewrite="custom",
    ),
    Idiom(
        id="device-string",
        section=SECTION,
        title="A device kept as its name",
        torch='device = "cuda" if torch.cuda.is_available() else "mps"\nx = x.to(device)',
        jax='device = jax.local_devices(backend="gpu")[0]\nx = jax.device_put(x, device)',
        tj=(
            'device = tj.device("cuda" if tj.cuda.is_available() else "mps")\n'
            "x = tj.to_device(x, device)"
        ),
        notes=(
            "torch takes a device's name wherever it takes a device, and so does "
            'torch2jax_device (`tj.to_device(x, "cuda:1")`, `with tj.device("mps"):`). '
            "A name stays a string: code that tests it (`'cuda' in device`) keeps working "
            "until the name becomes a `tj.device` (see `device-string-logic`). `scan` "
            "reports a name given as a parameter's default (`def load(path, "
            'device="cuda")`), as `getattr(args, "device", "cuda")`\'s fallback, and '
            'put together from a type and an index (`f"{device_type}:{rank}"`).'
        ),
        runs=False,
        torch_api=("str",),
        rewrite="custom",
    ),
    Idiom(
        id="device-string-logic",
        section=SECTION,
        title="Test a device by its name",
        torch=(
            'device_type = "cuda" if "cuda" in device else "cpu"\n'
            'on_gpu = device.startswith("cuda")'
        ),
        jax='device_type = device.platform  # "gpu", "cpu" or "tpu"\non_gpu = device_type == "gpu"',
        tj=('device_type = tj.device(device).type\non_gpu = tj.device(device).type == "cuda"'),
        notes=(
            'String tests on a device\'s name (`in`, `==`, `startswith`, `split(":")`) work '
            "while `device` is a string. Once it is a `tj.device` (or a `torch.device`), "
            "`'cuda' in device` raises `TypeError` and `device == \"cuda\"` is `False`: "
            'test `tj.device(device).type` (`"cuda"`, `"cpu"`, `"mps"`...) and '
            "`.index`, which take a name and a device alike. JAX's own platform names "
            '`"gpu"` where torch says `"cuda"`. A table keyed by device names '
            '(`{"cuda": "nccl", "cpu": "gloo"}.get(device_type)`) and '
            '`device_type not in ("cpu", "mps")` are the same tests, and so are '
            '`device == "auto"` (the choice left to the script) and `device[5:]` (the index '
            'cut out of `"cuda:N"`: `tj.device(device).index`).'
        ),
        runs=False,
        torch_api=("str.startswith", "str.__contains__", "str.__eq__"),
        rewrite="custom",
    ),
)
