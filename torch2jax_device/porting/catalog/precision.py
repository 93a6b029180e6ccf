"""Catalog rows, section "Precision": Mixed precision."""

from __future__ import annotations

from ..idiom import Idiom

SECTION = "Precision"

ROWS: tuple[Idiom, ...] = (
    Idiom(
        id="autocast",
        section=SECTION,
        title="Mixed precision on a device",
        torch=('with torch.autocast(device_type="cuda", dtype=torch.bfloat16):\n    y = model(x)'),
        jax="y = model(x.astype(jnp.bfloat16))  # with params cast, or Flax dtype=",
        tj=(
            "model = tj.to_device(model, jnp.bfloat16)  # floating state only\n"
            "y = model(tj.to_device(x, jnp.bfloat16))"
        ),
        notes=(
            "JAX has no autocast: computation runs in the dtype of its inputs. Cast "
            "parameters and inputs (or give Flax layers `dtype=jnp.bfloat16`, which keeps "
            "float32 parameters and computes in bfloat16). A project's own autocast "
            "(`autocast = get_autocast(args.precision)`, then `with autocast():`) is the "
            "same cast, made where the helper is defined."
        ),
        runs=False,
        torch_api=(
            "torch.autocast",
            "torch.amp.autocast",
            "torch.cuda.amp.autocast",
            "torch.cpu.amp.autocast",
            "torch.amp.*",
            "torch.cuda.amp.*",
            "torch.cpu.amp.*",
            "torch.is_autocast_enabled",
            "torch.get_autocast_dtype",
            "torch.get_autocast_gpu_dtype",
            # autocast's state, read to rebuild it elsewhere (a checkpointed block's)
            "torch.is_autocast_cache_enabled",
            "torch.is_autocast_cpu_enabled",
            "torch.get_autocast_cpu_dtype",
            "apex.amp.*",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="grad-scaler",
        section=SECTION,
        title="Loss scaling for float16",
        torch=(
            'scaler = torch.amp.GradScaler("cuda")\n'
            "scaler.scale(loss).backward()\n"
            "scaler.step(optimizer)\n"
            "scaler.update()"
        ),
        jax="grads = jax.grad(loss_fn)(params)  # bfloat16 or float32: no loss scaling",
        tj="grads = jax.grad(loss_fn)(params)  # bfloat16 or float32: no loss scaling",
        notes=(
            "A scaler keeps float16 gradients from underflowing. bfloat16 has float32's "
            "range, so JAX code computing in bfloat16 (`tj.cuda.is_bf16_supported()`) or "
            "float32 needs none: the scale/step/update lines become the optimizer update. "
            "For float16, multiply the loss by a constant and divide the gradients by it. "
            "`scan` reports a scaler's calls where it was made elsewhere too (a parameter "
            "annotated `GradScaler`, `self.grad_scaler`, `model.fp16_scaler`), and its "
            "private members taken or patched (`accelerator.scaler._unscale_grads_ = f`)."
        ),
        runs=False,
        torch_api=(
            "torch.amp.GradScaler",
            "torch.cuda.amp.GradScaler",
            "torch.cpu.amp.GradScaler",
            "torch.GradScaler",
            "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="tf32-matmul",
        section=SECTION,
        title="TensorFloat-32 matmuls",
        torch=(
            "torch.backends.cuda.matmul.allow_tf32 = True\ntorch.backends.cudnn.allow_tf32 = True"
        ),
        jax='jax.config.update("jax_default_matmul_precision", "tensorfloat32")',
        tj="tj.backends.cuda.matmul.allow_tf32 = True  # False: torch's default float32",
        notes=(
            "torch computes float32 matmuls in float32 unless told (`allow_tf32 = False`); "
            "JAX's default lets GPUs of compute capability 8.0 or newer use TF32 (on an "
            "H200, relative error 2.8e-4 against torch's 1.2e-6). For torch's numbers put "
            '`tj.configure(matmul_precision="highest")` at the top of the script (or '
            '`with jax.default_matmul_precision("highest"):` for a block). '
            "`torch.set_float32_matmul_precision(p)` is `tj.configure(matmul_precision=p)` "
            '(`"highest"`, `"high"`, `"medium"`). One JAX setting covers matmuls and '
            "convolutions (torch's `cudnn.allow_tf32` too). torch >= 2.9's "
            '`fp32_precision = "ieee"` (or `"tf32"`, `"none"`) is '
            '`tj.backends.fp32_precision = "ieee"` (also `tj.backends.cuda.matmul.'
            'fp32_precision`): `"ieee"` is JAX\'s `"highest"`.'
        ),
        runs=False,
        torch_api=(
            "torch.backends.cuda.matmul.allow_tf32",
            "torch.backends.cudnn.allow_tf32",
            "torch.set_float32_matmul_precision",
            "torch.get_float32_matmul_precision",
            "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
            "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
            "torch.backends.fp32_precision",
            "torch.backends.cuda.matmul.fp32_precision",
            "torch.backends.cudnn.fp32_precision",
            "torch.backends.cudnn.conv.fp32_precision",
            "torch.backends.cudnn.rnn.fp32_precision",
        ),
        rewrite="advice",
    ),
)
