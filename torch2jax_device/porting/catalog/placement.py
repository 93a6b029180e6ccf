"""Catalog rows, section "Placement": Tensor.to, Module.to, .cuda(), .cpu(), .device: moving data
and reading where it is."""

from __future__ import annotations

from ..idiom import Idiom

SECTION = "Placement"

ROWS: tuple[Idiom, ...] = (
    Idiom(
        id="tensor-to-device",
        section=SECTION,
        title="Move a tensor to a device",
        torch="x = x.to(device)",
        jax="x = jax.device_put(x, device)  # device must be a jax.Device",
        tj="x = tj.to_device(x, device)",
        notes=(
            "Committed to the device, so jitted code runs there. Returns the same object "
            "when nothing changes (`x.to(x.device) is x`). Takes torch tensors and NumPy "
            "arrays too; `jax.device_put` rejects strings and torch tensors."
        ),
        runs=False,
        torch_api=("Tensor.to",),
        tj_api=("tj.to_device",),
        rewrite="custom",
    ),
    Idiom(
        id="tensor-to-dtype",
        section=SECTION,
        title="Cast",
        torch="x = x.to(torch.float16)",
        jax="x = x.astype(jnp.float16)",
        tj="x = tj.to_device(x, torch.float16)",
        notes=(
            "Stays on its device. Any dtype object works: `jnp.float16`, "
            "`np.dtype('float16')`, `torch.float16`; a name only as the keyword "
            "(`tj.to_device(x, dtype='float16')`), since torch reads a string there as a device "
            "(`x.to('float16')` raises `Invalid device string`, and so does "
            "`tj.to_device(x, 'float16')`). The values are torch's whatever holds the data, for "
            "every pair of dtypes torch has: the cast comes before JAX's 64-bit narrowing (int64 "
            "`2**40` to float32 is `1.0995e12`, not the `0.0` of wrapping through int32); "
            "`float8_e4m3fn` saturates at ±448 and `float8_e8m0fnu` of 0 is `2**-127`, as in "
            "torch (ml_dtypes and XLA give NaN); a subnormal float is `True` as a bool; complex "
            "to real warns `ComplexCastWarning`, as torch warns. A float outside an integer "
            "dtype's range (or NaN, or infinite) cast to it is undefined behaviour in torch: "
            "torch's CPU wraps, XLA saturates. Calls torch refuses are refused too: a flag that "
            "is not a bool (`copy=1`, `non_blocking=None`), a dtype after another tensor "
            "(`tj.to_device(x, other, dtype)`), `other=` as a keyword, `copy=True` for a model."
        ),
        runs=False,
        torch_api=("Tensor.to",),
        tj_api=("tj.to_device",),
        rewrite="custom",
    ),
    Idiom(
        id="tensor-to-device-dtype",
        section=SECTION,
        title="Move and cast in one call",
        torch="x = x.to(device, torch.float16)",
        jax="x = jax.device_put(x.astype(jnp.float16), device)",
        tj="x = tj.to_device(x, device, torch.float16)",
        runs=False,
        torch_api=("Tensor.to",),
        tj_api=("tj.to_device",),
        rewrite="custom",
    ),
    Idiom(
        id="tensor-to-other",
        section=SECTION,
        title="Match another tensor's device and dtype",
        torch="x = x.to(other)",
        jax="x = jax.device_put(x.astype(other.dtype), other.device)",
        tj="x = tj.to_device(x, other)",
        runs=False,
        torch_api=("Tensor.to",),
        tj_api=("tj.to_device",),
        rewrite="custom",
    ),
    Idiom(
        id="tensor-to-copy",
        section=SECTION,
        title="Always copy",
        torch="y = x.to(device, copy=True)",
        jax="y = jax.device_put(x, device, may_alias=False)",
        tj="y = tj.to_device(x, device, copy=True)",
        runs=False,
        torch_api=("Tensor.to",),
        tj_api=("tj.to_device",),
        rewrite="custom",
    ),
    Idiom(
        id="tensor-non-blocking",
        section=SECTION,
        title="Asynchronous transfer",
        torch="x = x.to(device, non_blocking=True)",
        jax="x = jax.device_put(x, device)  # always asynchronous",
        tj="x = tj.to_device(x, device, non_blocking=True)",
        notes=(
            "`non_blocking=False` (the default) returns once the data is on the device. "
            "Either way host data (NumPy, CPU tensors) has been read when the call returns, "
            "as torch's copies from pageable memory have, so writing to the source "
            "afterwards is safe (`jax.device_put` onto a CPU device may still read it, "
            "jax#37830); on the CPU an aligned NumPy array is shared, as "
            "`torch.as_tensor` shares it. "
            "torch's positional forms read the same: `tj.to_device(x, device, dtype, True)`, "
            "`tj.to_device(x, dtype, False, True)` (non_blocking, copy), "
            "`tj.to_device(x, other, True)`."
        ),
        runs=False,
        torch_api=("Tensor.to",),
        tj_api=("tj.to_device",),
        rewrite="custom",
    ),
    Idiom(
        id="tensor-cuda",
        section=SECTION,
        title="`.cuda()`",
        torch="x = x.cuda()",
        jax='x = jax.device_put(x, jax.local_devices(backend="cuda")[0])',
        tj='x = tj.to_device(x, "cuda")',
        runs=False,
        torch_api=("Tensor.cuda",),
        tj_api=("tj.to_device",),
        rewrite="custom",
    ),
    Idiom(
        id="tensor-cpu",
        section=SECTION,
        title="`.cpu()`",
        torch="x = x.cpu()",
        jax='x = jax.device_put(x, jax.local_devices(backend="cpu")[0])',
        tj='x = tj.to_device(x, "cpu")',
        notes="For a NumPy array use `np.asarray(x)` (zero-copy from a CPU array).",
        runs=False,
        torch_api=("Tensor.cpu",),
        tj_api=("tj.to_device",),
        rewrite="custom",
    ),
    Idiom(
        id="batch-to-device",
        section=SECTION,
        title="Move a whole batch (dict, list, dataclass, ...)",
        torch="batch = {k: v.to(device) for k, v in batch.items()}",
        jax="batch = jax.device_put(batch, device)  # dict keys come back sorted",
        tj="batch = tj.to_device(batch, device)",
        notes=(
            "One batched transfer. Dicts keep their key order, as torch's comprehension does "
            "(`x, y = batch.values()` unpacks the same), and keys of mixed types work; "
            "`jax.device_put` and every JAX tree function sort dict keys, and raise for "
            "keys that cannot be sorted (`{1: a, 'a': b}`). Containers keep their types "
            "(`defaultdict` with its factory, namedtuples, dataclasses, subclasses of dict, "
            "list and tuple whatever arguments a tuple subclass's constructor takes, `UserDict` "
            "such as `BatchEncoding`); strings, Python numbers and NumPy scalars "
            "(`np.float32(0.5)`) pass through, as the comprehension leaves what has no `.to`, "
            "where `jax.device_put` turns every number into an array."
        ),
        runs=False,
    ),
    Idiom(
        id="batch-encoding-to-device",
        section=SECTION,
        title="Move a tokenizer's or processor's output (`BatchEncoding`, `BatchFeature`)",
        torch='inputs = tokenizer(texts, return_tensors="pt").to(device)',
        jax='inputs = jax.device_put(dict(tokenizer(texts, return_tensors="np")), device)',
        tj='inputs = tj.to_device(tokenizer(texts, return_tensors="pt"), device)',
        notes=(
            "A Hugging Face batch is a dict of tensors, not a tensor: its tensors become JAX "
            "arrays committed to the device, other entries pass through, and the result is "
            "a `BatchEncoding` again. `BatchEncoding.to` moves the batch *in place* and "
            "returns it; `tj.to_device` returns a moved copy and leaves its input as it "
            "was, so assign the result (`inputs = tj.to_device(inputs, device)`): `scan "
            "--diff` holds back a move whose input is read again, or whose result is "
            "dropped. `BatchEncoding.to` moves torch tensors only: NumPy arrays "
            '(`return_tensors="np"`) stay, where `tj.to_device` makes JAX arrays of them. '
            "With a dtype (`BatchFeature.to(device, dtype)`) only floating-point "
            "entries are cast, in both."
        ),
        runs=False,
        torch_api=("transformers.BatchEncoding.to", "transformers.BatchFeature.to"),
        tj_api=("tj.to_device",),
        rewrite="custom",
    ),
    Idiom(
        id="tensor-to-memory-format",
        section=SECTION,
        title="Channels-last layout (`memory_format=`)",
        torch="x = x.to(device, memory_format=torch.channels_last)",
        jax="x = jax.device_put(x, device)  # no strides: XLA chooses every layout",
        tj="x = tj.to_device(x, device, memory_format=torch.channels_last)",
        notes=(
            "Taken for ported code, without effect: JAX arrays have no strides, and XLA "
            "lays out each buffer itself (channels-last for GPU convolutions where that is "
            "faster). The values are the same, as in torch; `x.stride()` and "
            "`x.is_contiguous(memory_format=...)` have nothing to report. As in torch, "
            "`channels_last` needs a 4-d array (`channels_last_3d`: 5-d), and "
            "`model.to(memory_format=...)` any module. Without a device, "
            "`x.to(memory_format=...)` keeps each array where it is, in both."
        ),
        runs=False,
    ),
    Idiom(
        id="tensor-device",
        section=SECTION,
        title="Which device is it on?",
        torch="device = x.device",
        jax="device = x.device  # a Sharding if sharded; AttributeError under jit",
        tj="device = tj.device_of(x)",
        notes="`None` under `jax.jit` (tracers have no device). Works on trees and modules.",
        runs=False,
        torch_api=("Tensor.device",),
        tj_api=("tj.device_of",),
        rewrite="custom",
    ),
    Idiom(
        id="module-to",
        section=SECTION,
        title="Move a model",
        torch="model = model.to(device)",
        jax="nnx.update(model, jax.device_put(nnx.state(model), device))",
        tj="model = tj.to_device(model, device)",
        notes=(
            "Flax NNX modules move in place and the same module is returned; "
            "`jax.device_put(model, d)` returns a new module. Linen variables move as trees."
        ),
        runs=False,
        torch_api=("Module.to", "Module.cuda", "Module.cpu"),
        tj_api=("tj.to_device",),
        rewrite="custom",
    ),
    Idiom(
        id="module-to-dtype",
        section=SECTION,
        title="Cast a model",
        torch="model = model.to(torch.bfloat16)",
        jax="# jax.tree.map over the floating-point leaves of nnx.state(model), then nnx.update",
        tj="model = tj.to_device(model, jnp.bfloat16)",
        notes="Casts floating-point and complex state only, as `Module.to` does.",
        runs=False,
        torch_api=("Module.to",),
        tj_api=("tj.to_device",),
        rewrite="custom",
    ),
    Idiom(
        id="parameters-device",
        section=SECTION,
        title="Device of a model",
        torch="device = next(model.parameters()).device",
        jax="device = jax.tree.leaves(nnx.state(model, nnx.Param))[0].device",
        tj="device = next(tj.parameters(model)).device",
        notes="`tj.device_of(model)` also checks that all parameters agree.",
        runs=False,
        torch_api=("Module.parameters",),
        tj_api=("tj.parameters",),
        rewrite="custom",
    ),
    Idiom(
        id="mixed-device-error",
        section=SECTION,
        title="Tensors on two devices",
        torch="z = x + y  # RuntimeError: Expected all tensors to be on the same device",
        jax="z = x + y  # ValueError: Received incompatible devices for jitted computation",
        tj="tj.check_same_device(x, y)  # MixedDeviceError naming every device and leaf",
        notes=(
            "JAX only complains about committed arrays; uncommitted ones move silently. As "
            "in torch, a 0-dim CPU tensor meets any device, and so does an uncommitted 0-d "
            "JAX array (optax's step count before the first update)."
        ),
        runs=False,
    ),
    Idiom(
        id="from-numpy",
        section=SECTION,
        title="Share a NumPy array",
        torch="t = torch.from_numpy(a)",
        jax='t = jax.device_put(a, jax.local_devices(backend="cpu")[0])',
        tj="t = tj.to_jax(a)",
        notes=(
            "Shares memory only if the buffer is 64-byte aligned (JAX's CPU rule); "
            "otherwise copies, or raises with `strict=True`."
        ),
        runs=False,
        torch_api=("torch.from_numpy",),
        tj_api=("tj.to_jax",),
        rewrite="rename",
    ),
    Idiom(
        id="tensor-to-jax",
        section=SECTION,
        title="Hand a torch tensor to JAX",
        torch="x = jax.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(t))",
        jax="x = jax.dlpack.from_dlpack(t.detach())",
        tj="x = tj.to_jax(t)",
        notes=(
            "Zero-copy through DLPack where possible; int64 becomes int32 without x64 "
            "(warned). JAX 0.10 takes no DLPack capsules (`torch.utils.dlpack.to_dlpack`), "
            "only objects with `__dlpack__`. Where `jax.dlpack.from_dlpack(t)` (or "
            "`jnp.from_dlpack`) succeeds on a tensor, `tj.to_jax(t)` gives the same "
            "device, dtype and sharing, except for a dense tensor with its negative bit set "
            "(a lazy negated view): DLPack drops the bit and shares wrong signs, `tj.to_jax` "
            "copies the right values. Where DLPack refuses, `tj.to_jax` copies: a tensor "
            "that requires grad (detached), strided or conjugate ones. It takes no other "
            "DLPack exporters (CuPy, TensorFlow), so `scan --diff` leaves these calls to you."
        ),
        runs=False,
        torch_api=(
            "torch.utils.dlpack.to_dlpack",
            "jax.dlpack.from_dlpack",
            "jax.numpy.from_dlpack",
        ),
        tj_api=("tj.to_jax",),
        rewrite="custom",
    ),
    Idiom(
        id="jax-to-tensor",
        section=SECTION,
        title="Hand a JAX array to torch",
        torch="t = torch.from_dlpack(x)",
        jax="t = torch.from_dlpack(x)",
        tj="t = tj.to_torch(x)",
        notes=(
            "Shares the memory, dtype included: without `jax_enable_x64` (JAX's default) "
            "int64 labels come back from a JAX step as int32, which torch's losses refuse "
            "(`expected target dtype to be Long`). Ask for torch's dtype: "
            "`tj.to_torch(x, dtype=torch.int64)` (a copy), or `.long()`. For a JAX array, "
            "`tj.to_torch(x)` is `torch.from_dlpack(x)` (`torch.utils.dlpack.from_dlpack`): "
            "same device, dtype and shared memory; `scan --diff` renames the call where "
            "the argument is known to be one (`jax.dlpack.to_dlpack(x)`, gone from JAX "
            "0.10, included). torch's also takes capsules and other DLPack exporters, "
            "which `tj.to_torch` refuses."
        ),
        runs=False,
        torch_api=("torch.from_dlpack", "torch.utils.dlpack.from_dlpack", "jax.dlpack.to_dlpack"),
        tj_api=("tj.to_torch",),
        rewrite="custom",
    ),
    Idiom(
        id="parameters-device-type",
        section=SECTION,
        title="Branch on where the model is",
        torch='on_gpu = next(model.parameters()).device.type == "cuda"',
        jax='on_gpu = jax.tree.leaves(nnx.state(model, nnx.Param))[0].device.platform == "gpu"',
        tj='on_gpu = next(tj.parameters(model)).device.type == "cuda"',
        notes=(
            "`tj.parameters` yields `tj.Parameter` views: `.device` is a torch-style device "
            "(`.type`, `.index`, `str`, `==` with `torch.device`; the process-local index, "
            "never JAX's global id), `.data` the array, and each is still an array in JAX "
            "code (`jnp`, `jax.jit` arguments, `jax.device_put`, pytrees)."
        ),
        runs=False,
    ),
    Idiom(
        id="parameter-count",
        section=SECTION,
        title="Count parameters",
        torch="n = sum(p.numel() for p in model.parameters())",
        jax="n = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))",
        tj="n = sum(p.numel() for p in tj.parameters(model))",
        notes=(
            "NNX kernels are `(in, out)` where torch's weights are `(out, in)`. A count "
            "kept in a loop (`for p in model.parameters(): total += p.numel()`) likewise."
        ),
        runs=False,
        torch_api=("Module.parameters",),
        tj_api=("tj.parameters",),
        rewrite="custom",
    ),
    Idiom(
        id="module-to-empty",
        section=SECTION,
        title="Give a meta-initialised model memory: to_empty",
        torch=(
            'with torch.device("meta"):\n'
            "    model = Model(config)\n"
            'model = model.to_empty(device="cuda")\n'
            "model.load_state_dict(torch.load(path))"
        ),
        jax="model = nnx.eval_shape(lambda: Model(config, rngs=nnx.Rngs(0)))",
        tj=(
            "model = nnx.eval_shape(lambda: Model(config, rngs=nnx.Rngs(0)))\n"
            'model = tj.load_state(model, path, device="cuda")'
        ),
        notes=(
            "`to_empty` gives a model built on the `meta` device memory without values, "
            "to be filled from a checkpoint. JAX makes arrays with their values: build "
            "the model abstractly (`nnx.eval_shape`, shapes and dtypes only) and "
            "`tj.load_state(abstract, path, device=...)` fills it where `device` says, "
            "with no full copy anywhere (see the how-to `big-models.md`). A model "
            "initialised after `to_empty` (`reset_parameters()`) is built as it is: "
            "`Model(config, rngs=nnx.Rngs(0))` under `with tj.device(device):`."
        ),
        runs=False,
        torch_api=("Module.to_empty",),
        tj_api=("tj.load_state",),
        rewrite="advice",
    ),
    Idiom(
        id="optimizer-parameters",
        section=SECTION,
        title="Hand a model's parameters to an optimizer",
        torch="optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)",
        jax="optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)  # tx: optax's rule: adamw(lr)",
        tj=(
            "optimizer = tj.to_device("
            "nnx.Optimizer(model, tj.optim.AdamW(lr=1e-3), wrt=nnx.Param), device)"
        ),
        notes=(
            "An NNX model has no `.parameters()` iterator to hand over: the optimizer takes "
            "the model and a filter (`nnx.Param`), and `optimizer.update(model, grads)` "
            "steps it. Torch's parameter groups are `tj.optim`'s one positional argument, "
            "each group's `params` a predicate, nnx filter or list of paths selecting the "
            "model's parameters (or `optax.multi_transform` over labels, with optax's own "
            "rules). The "
            "moment estimates are made from the parameters, so they are where the "
            "parameters are, but the step counter is a new array on the default device, "
            "not committed: the first update commits it, and the training step compiles a "
            "second time. Placed with the model (`tj.to_device`, which returns the placed "
            "optimizer), the step compiles once, as torch's optimizer, whose state is made "
            "on the parameters' device, never moves. `scan` reports the parameters handed "
            "to any optimizer class and to a project's own factory "
            "(`instantiate_torch_optimizer(name, model.parameters())`, `opt = build(...)`)."
        ),
        runs=False,
        torch_api=("Module.parameters",),
        tj_api=("tj.to_device",),
        rewrite="advice",
    ),
    Idiom(
        id="torch-module-to",
        section=SECTION,
        title="A torch module in mixed code",
        torch="torch_model = torch_model.to(device)",
        jax="torch_model = torch_model.to(torch_device)  # JAX cannot hold torch modules",
        tj="torch_model = torch_model.to(device.torch_device)  # device = tj.device(...)",
        notes=(
            "`tj.to_device(torch_model, ...)` raises `tj.ConversionError` (never a silent "
            "no-op); bring the weights to JAX with `tj.to_device(torch_model.state_dict(), "
            "device)`. `tj.device_of` and `tj.parameters` read torch modules too."
        ),
        runs=False,
    ),
    Idiom(
        id="equinox-module-to",
        section=SECTION,
        title="Move an Equinox model",
        torch="model = model.to(device)",
        jax="model = jax.device_put(model, device)  # non-array leaves stay as they are",
        tj="model = tj.to_device(model, device)  # a new module: Equinox modules are immutable",
        notes=(
            "Returns the moved module (keep the result; the input is unchanged). "
            "`tj.device_of(model)` and `tj.parameters(model)` read every array leaf."
        ),
        runs=False,
    ),
    Idiom(
        id="strict-placement",
        section=SECTION,
        title="Never move data behind my back",
        torch="loss = step(model, batch)  # RuntimeError if they are on two devices",
        jax="# jax.transfer_guard_device_to_device('disallow'); host data is moved silently",
        tj=(
            "step = tj.strict_placement(step)  # or @tj.strict_placement\n"
            "loss = step(model, batch)  # tj.MixedDeviceError with torch's message"
        ),
        notes=(
            "Arguments on two devices, or host data meeting arrays on an accelerator, raise "
            "torch's error with the argument paths, the line and the fix; "
            "`with tj.strict_placement():` turns JAX's device errors in a block into torch's. "
            "Warns (`tj.CpuComputationWarning`) when CPU-committed inputs keep the call on the "
            "CPU of a GPU machine. Explicit `tj.to_device`/`jax.device_put` stay allowed."
        ),
        runs=False,
    ),
    Idiom(
        id="strict-placement-process",
        section=SECTION,
        title="The same for the whole process",
        torch="# always the case in PyTorch",
        jax="jax.config.update('jax_transfer_guard_device_to_device', 'disallow')",
        tj="tj.set_strict_placement(True)",
        notes=(
            "JAX's device-to-device guard for every thread: uncommitted arrays are no longer "
            "moved silently. Set it before the code first runs: JAX does not re-check jitted "
            "calls that already ran without it. Its error becomes torch's inside "
            "`tj.strict_placement` scopes."
        ),
        runs=False,
    ),
    Idiom(
        id="tensor-device-type",
        section=SECTION,
        title="Is it on the GPU?",
        torch="on_gpu = x.is_cuda",
        jax='on_gpu = x.device.platform == "gpu"  # AttributeError for sharded arrays',
        tj='on_gpu = tj.device_of(x).type == "cuda"',
        notes=(
            '`x.device.type == "cuda"` likewise. `x.get_device()` (the index, -1 on the CPU) '
            "is `tj.get_device(x)`: `tj.device_of(x).index` is `None` on the CPU, as "
            '`torch.device("cpu").index` is. `tj.device_of` answers for torch tensors too. '
            "`x.is_meta` (a tensor with a shape and no data) is "
            "`isinstance(x, jax.ShapeDtypeStruct)`: what `nnx.eval_shape` puts in an "
            'abstract model. `device.type == "cuda"` on a device handed in (a parameter '
            "made a `torch.device` only when it is a name) or a helper returns "
            "(`get_current_accelerator().type == DeviceType.CUDA`, an enum of device names "
            "included) keeps its text: what hands the device over must give a `tj.device`."
        ),
        runs=False,
        torch_api=(
            "Tensor.is_cuda",
            "Tensor.is_cpu",
            "Tensor.is_meta",
            "Tensor.get_device",
            "Tensor.device.type",
        ),
        rewrite="custom",
    ),
)
