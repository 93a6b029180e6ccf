"""``scan --diff`` on code the scanner was not written against, a third round (after
``test_scan_unseen.py`` and ``test_scan_unseen_libraries.py``).

Each input is a small excerpt of a real file (its repository and path in the test's
docstring or a comment), cut down to the lines a finding depends on, or a case shaped
after one.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import torch2jax_device as tj
from tests.support.cli import found_rules, port_text, scan_text

# -- Another name for the moved memory (the write-after check follows aliases) ------------


def test_a_write_through_another_name_shows_through_torchs_move_only() -> None:
    import torch

    # The oracle: x.cpu() of a CPU tensor is the tensor itself, and torch.from_numpy
    # shares the array, so a write through any other name for the same memory shows
    # through torch's result; tj's copy of a misaligned buffer does not see it.
    w = torch.zeros(1025)[1:]
    alias, holders = w, [w]
    kept, moved = w.cpu(), tj.to_device(w, "cpu")
    alias.add_(1)
    holders[0][1] = 5.0
    assert float(kept[0]) == 1.0 and float(kept[1]) == 5.0
    assert float(moved[0]) == 0.0 and float(moved[1]) == 0.0

    a = np.zeros(17, np.float32)[1:]
    b = a
    tensor, converted = torch.from_numpy(a), tj.to_jax(a)
    b[0] = 5.0
    assert float(tensor[0]) == 5.0 and float(converted[0]) == 0.0


_MOVE = "import numpy as np\nimport torch\nimport torch2jax_device as tj\n\n"


@pytest.mark.parametrize(
    ("source", "why"),
    [
        (
            """\
            a = np.zeros(16, np.float32)
            b = a
            t = torch.from_numpy(a)
            b[0] = 1
            print(tj.to_jax(t))
            """,
            "line 8: b[0] = ... writes into it (b holds a: line 6)",
        ),
        (
            """\
            a = np.zeros(16, np.float32)
            b = a
            t = torch.from_numpy(b)
            a[0] = 1
            print(tj.to_jax(t))
            """,
            "line 8: a[0] = ... writes into it (a holds b: line 6)",
        ),
        (
            # pytorch/examples mnist_hogwild-style shared parameters: the optimizer holds
            # them, and its step writes into them.
            """\
            w = torch.zeros(16, requires_grad=True)
            opt = torch.optim.SGD([w], lr=0.1)
            snapshot = w.detach().cpu()
            opt.step()
            print(tj.to_jax(snapshot))
            """,
            "line 8: opt.step may reach w.detach() through opt",
        ),
        (
            """\
            w, bias = torch.zeros(16), torch.zeros(1)
            y = w.cpu()
            for p in (w, bias):
                p.add_(1)
            print(tj.to_jax(y))
            """,
            "line 8: p.add_(...) writes into it (p holds w: line 7)",
        ),
        (
            """\
            w = torch.zeros(16)
            params = []
            params.append(w)
            y = w.cpu()
            params[0].mul_(2)
            print(tj.to_jax(y))
            """,
            "line 9: params[0].mul_(...) writes into w (params holds w: line 7)",
        ),
        (
            """\
            w = torch.zeros(16)
            state = {"w": w}
            y = w.cpu()
            state["w"].zero_()
            print(tj.to_jax(y))
            """,
            "line 8: state['w'].zero_(...) writes into w (state holds w: line 6)",
        ),
        (
            """\
            def step(batch):
                x = batch["x"]
                y = batch["x"].cpu()
                x.add_(1)
                return tj.to_jax(y)
            """,
            "line 8: x.add_(...) writes into it (x holds batch['x']: line 6)",
        ),
        (
            """\
            def step(batch):
                x = batch["x"]
                y = x.cpu()
                batch["x"].add_(1)
                return tj.to_jax(y)
            """,
            "line 8: batch['x'].add_(...) writes into x (batch holds x: line 6)",
        ),
        (
            """\
            w = torch.zeros(16)
            y = w.cpu()
            (v := w).add_(1)
            print(tj.to_jax(y))
            """,
            "line 7: (v := w).add_(...) writes into it",
        ),
        (
            """\
            w = torch.zeros(16)
            p = torch.nn.Parameter(w)
            y = w.cpu()
            p.data.add_(1)
            print(tj.to_jax(y))
            """,
            "line 8: p.data.add_(...) writes into w (p holds w: line 6)",
        ),
        (
            """\
            w = torch.zeros(16)
            y = w.cpu()
            w.view(-1).add_(1)
            print(tj.to_jax(y))
            """,
            "line 7: w.view(-1).add_(...) writes into it",
        ),
        (
            # x = x.to(d) rebinds x, but b still holds the tensor moved.
            """\
            x = torch.zeros(16)
            b = x
            x = x.cpu()
            b.add_(1)
            print(tj.to_jax(x))
            """,
            "line 8: b.add_(...) writes into it (b holds x: line 6)",
        ),
        (
            """\
            class Buffer:
                def __init__(self, w):
                    self.w = w
                    self.first = tj.to_jax(w.cpu())
                def bump(self):
                    self.w.add_(1)
            """,
            "line 10: self.w.add_(...) writes into w (self holds w: line 7)",
        ),
        (
            # A module keeping the tensor as a buffer, shifted in place later.
            """\
            class Window(torch.nn.Module):
                def __init__(self, w):
                    super().__init__()
                    self.register_buffer("buf", w)
                    self.first = tj.to_jax(w.cpu())

                def push(self, frame):
                    self.buf[:-1] = self.buf[1:].clone()
            """,
            "line 12: self.buf[:-1] = ... writes into w (self holds w: line 8)",
        ),
    ],
)
def test_a_write_through_another_name_holds_the_move_back(source: str, why: str) -> None:
    source = _MOVE + textwrap.dedent(source)
    assert port_text(source) == source
    (finding,) = [f for f in scan_text(source) if f.rule in ("from-numpy", "tensor-cpu")]
    assert why in finding.reason, finding.reason


@pytest.mark.parametrize(
    "source",
    [
        """\
        a = np.zeros(16, np.float32)
        b = a
        print(b.sum(), len(b))
        t = torch.from_numpy(a)
        print(tj.to_jax(t), b.mean())
        """,
        """\
        w = torch.zeros(16)
        ws = [w]
        y = w.cpu()
        print(len(ws), tj.to_jax(y))
        """,
        """\
        x = torch.zeros(16)
        b = x
        x = x.cpu()
        print(tj.to_jax(x), b.sum())
        """,
    ],
)
def test_another_name_only_read_leaves_the_move_rewritten(source: str) -> None:
    source = _MOVE + textwrap.dedent(source)
    assert port_text(source) != source
    assert all(not f.reason for f in scan_text(source) if f.rule in ("from-numpy", "tensor-cpu"))


# -- A Hugging Face batch moved (known hole B) --------------------------------------------


def _batch_encoding_class() -> type:
    """A stand-in for transformers' ``BatchEncoding`` (transformers is not installed
    here): a ``UserDict`` whose ``to`` is transformers' own, from
    huggingface/transformers src/transformers/tokenization_utils_base.py: it moves the
    tensors in place and returns the batch itself."""
    import collections

    import torch

    class BatchEncoding(collections.UserDict):  # type: ignore[type-arg]
        def to(self, device: object, *, non_blocking: bool = False) -> BatchEncoding:
            self.data = {
                k: v.to(device=device, non_blocking=non_blocking)
                if isinstance(v, torch.Tensor)
                else v
                for k, v in self.data.items()
            }
            return self

    return BatchEncoding


@pytest.mark.idiom("batch-encoding-to-device")
def test_a_tokenizers_batch_moves_as_a_batch() -> None:
    import jax
    import torch

    batch_encoding = _batch_encoding_class()
    ids = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    mask = torch.ones(2, 3, dtype=torch.int32)
    theirs = batch_encoding({"input_ids": ids, "attention_mask": mask, "length": 3}).to("cpu")
    ours = tj.to_device(
        batch_encoding({"input_ids": ids, "attention_mask": mask, "length": 3}), "cpu"
    )
    assert type(ours) is batch_encoding and ours.keys() == theirs.keys()
    assert ours["length"] == theirs["length"] == 3
    for key in ("input_ids", "attention_mask"):
        assert isinstance(ours[key], jax.Array) and ours[key].committed
        np.testing.assert_array_equal(np.asarray(ours[key]), theirs[key].numpy())

    # What the rewrite must not hide: torch's .to moves the batch itself, tj's leaves it.
    encoded = batch_encoding({"input_ids": ids})
    assert encoded.to("cpu") is encoded
    kept = batch_encoding({"input_ids": ids})
    assert tj.to_device(kept, "cpu") is not kept and isinstance(kept["input_ids"], torch.Tensor)
    # NumPy entries (return_tensors="np"): torch's .to leaves them, tj's makes JAX arrays.
    arrays = batch_encoding({"input_ids": ids.numpy()})
    assert isinstance(arrays.to("cpu")["input_ids"], np.ndarray)
    assert isinstance(tj.to_device(arrays, "cpu")["input_ids"], jax.Array)


# Shaped after huggingface/transformers examples/pytorch/text-generation/run_generation.py
# and the model cards' snippets: a tokenizer's or processor's output moved.
_HF = """\
    import torch
    import torch2jax_device as tj
    from transformers import AutoProcessor, AutoTokenizer

    device = tj.device("cpu")
    tokenizer = AutoTokenizer.from_pretrained("gpt2")
    processor = AutoProcessor.from_pretrained("openai/clip-vit-base-patch32")
    """


@pytest.mark.parametrize(
    ("code", "rewritten"),
    [
        (
            'inputs = tokenizer(["hi"], return_tensors="pt").to(device)\n'
            'print(tj.to_jax(inputs["input_ids"]))\n',
            'inputs = tj.to_device(tokenizer(["hi"], return_tensors="pt"), device)',
        ),
        (
            'inputs = processor(text=["a cat"], return_tensors="pt").to(device, torch.float16)\n'
            'print(tj.to_jax(inputs["input_ids"]))\n',
            'inputs = tj.to_device(processor(text=["a cat"], return_tensors="pt"), device, '
            "torch.float16)",
        ),
        (
            'inputs = tokenizer(["hi"], return_tensors="pt")\n'
            "inputs = inputs.to(device)\n"
            'print(tj.to_jax(inputs["input_ids"]))\n',
            "inputs = tj.to_device(inputs, device)",
        ),
        (
            'inputs, labels = tokenizer(["hi"], return_tensors="pt"), 3\n'
            "inputs, labels = inputs.to(device), labels\n"
            'print(tj.to_jax(inputs["input_ids"]), labels)\n',
            "inputs, labels = tj.to_device(inputs, device), labels",
        ),
    ],
)
def test_a_tokenizers_batch_moved_is_reported_as_a_batch(code: str, rewritten: str) -> None:
    source = textwrap.dedent(_HF) + code
    (finding,) = [f for f in scan_text(source) if "to-device" in f.rule]
    assert finding.rule == "batch-encoding-to-device" and not finding.reason
    assert rewritten in port_text(source).splitlines()


@pytest.mark.parametrize(
    ("code", "why"),
    [
        (
            'encoded = tokenizer(["hi"], return_tensors="pt")\n'
            "moved = encoded.to(device)\n"
            'print(tj.to_jax(moved["input_ids"]), tj.to_jax(encoded["input_ids"]))\n',
            "line 10 reads encoded again: encoded.to(...) moves the BatchEncoding in place",
        ),
        (
            'encoded = tokenizer(["hi"], return_tensors="pt")\n'
            "encoded.to(device)\n"
            'print(tj.to_jax(encoded["input_ids"]))\n',
            "the result is dropped: encoded.to(...) moves the BatchEncoding in place",
        ),
        (
            # NumPy arrays: BatchEncoding.to moves torch tensors only.
            'inputs = tokenizer(["hi"], return_tensors="np").to(device)\n'
            'print(tj.to_jax(inputs["input_ids"]))\n',
            'return_tensors="np": BatchEncoding.to moves torch tensors only',
        ),
        (
            # torch's in-place move reaches the batch b holds too; tj.to_device's copy not.
            'inputs = tokenizer(["hi"], return_tensors="pt")\n'
            "b = inputs\n"
            "inputs = inputs.to(device)\n"
            'print(tj.to_jax(b["input_ids"]))\n',
            "line 9 gives inputs another holder: inputs.to(...) moves the BatchEncoding",
        ),
    ],
)
def test_a_batch_moved_in_place_and_read_again_is_not_rewritten(code: str, why: str) -> None:
    source = textwrap.dedent(_HF) + code
    assert port_text(source) == source
    (finding,) = [f for f in scan_text(source) if "-to" in f.rule]
    assert finding.rule == "batch-encoding-to-device" and why in finding.reason


# -- torch's runtime calls while torch still works in the file -----------------------------


def test_a_query_that_picks_a_torch_device_is_not_rewritten() -> None:
    """A device helper shaped after mali8800/pong-project utils.py: the torch.device it
    returns stays torch's (its callers place torch data with it), so the query choosing
    it must stay torch's too; JAX's answer (a JAX GPU beside a CPU-only torch) would
    hand torch a device it cannot use."""
    source = """\
        import torch


        def get_device():
            if torch.cuda.is_available():
                return torch.device("cuda")
            elif torch.backends.mps.is_available():
                return torch.device("mps")
            else:
                return torch.device("cpu")
        """
    assert port_text(source) == textwrap.dedent(source)
    reasons = {f.rule: f.reason for f in scan_text(source)}
    assert "(<string>:6: device-type)" in reasons["cuda-is-available"]
    assert "(<string>:6: device-type)" in reasons["mps-is-available"]


def test_runtime_calls_beside_torch_compute_are_not_rewritten() -> None:
    """A benchmark helper (a public one, shaped after many: synchronize, reset the peak,
    run ``fn`` under ``torch.no_grad()``, read the peak): ``fn`` computes with torch, so
    ``tj.cuda.synchronize()`` would not wait for its kernels and
    ``tj.cuda.max_memory_allocated()`` would measure JAX's memory, not torch's."""
    source = """\
        import gc
        import time

        import torch


        def bench(name, fn, t_warmup):
            torch.cuda.synchronize()
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            start_mem = torch.cuda.max_memory_allocated()
            t = time.time()
            while True:
                with torch.no_grad():
                    fn()
                if time.time() - t > t_warmup:
                    break
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() - start_mem
            print(f"[{name}] peak {peak / 2**20:.1f} MiB")
        """
    assert port_text(source) == textwrap.dedent(source)
    findings = scan_text(source)
    assert {f.rule for f in findings} >= {"cuda-synchronize", "cuda-max-memory-allocated"}
    for finding in findings:
        assert "torch still computes (<string>:15: torch.no_grad)" in finding.reason


# -- What a loop over a model's tensors binds ----------------------------------------------

# huggingface/pytorch-image-models timm/utils/model_ema.py, ModelEmaV2._update and
# ModelEmaV3.set: model_v is a tensor of model.state_dict(), not a module (its name
# starts with "model").
TIMM_EMA = """\
    from copy import deepcopy

    import torch
    import torch.nn as nn


    class ModelEmaV3(nn.Module):
        def __init__(self, model, decay=0.9999, device=None):
            super().__init__()
            self.module = deepcopy(model)
            self.decay = decay
            self.device = device  # perform ema on different device from model if set

        def _update(self, model, update_fn):
            with torch.no_grad():
                for ema_v, model_v in zip(
                    self.module.state_dict().values(), model.state_dict().values()
                ):
                    if self.device is not None:
                        model_v = model_v.to(device=self.device)
                    ema_v.copy_(update_fn(ema_v, model_v))

        @torch.no_grad()
        def set(self, model):
            for ema_v, model_v in zip(
                self.module.state_dict().values(), model.state_dict().values()
            ):
                ema_v.copy_(model_v.to(device=self.device))

        def count(self, model):
            for name, param in model.named_parameters():
                param.data = param.data.to(self.device)
            return sum(model_p.cpu().numel() for model_p in model.parameters())
    """


def test_a_models_tensors_in_a_loop_move_as_tensors() -> None:
    findings = [f for f in scan_text(TIMM_EMA) if f.rule != "startup-order"]
    assert [(f.line, f.rule) for f in findings if "-to" in f.rule or "-cpu" in f.rule] == [
        (20, "tensor-to-device"),
        (28, "tensor-to-device"),
        (32, "tensor-to-device"),
        (33, "tensor-cpu"),
    ]
    assert all("looks like a module" not in f.reason for f in findings)
    assert port_text(TIMM_EMA) == textwrap.dedent(TIMM_EMA)


def test_the_default_device_stays_torchs_before_code_the_scanner_does_not_follow() -> None:
    """A NeRF entry point (a public nerf-pytorch fork's main.py, "Use new API instead of
    deprecated set_default_tensor_type"): train() comes from the project's own module,
    which creates torch tensors on the default device; tj.set_default_device would leave
    them on the CPU."""
    source = """\
        import torch
        import numpy as np

        from train import train

        if __name__=='__main__':
            np.random.seed(0)
            if torch.cuda.is_available():
                torch.set_default_device('cuda')
                print("Using CUDA")
            torch.set_default_dtype(torch.float32)
            train()
        """
    assert port_text(source) == textwrap.dedent(source)
    reasons = {f.rule: f.reason for f in scan_text(source)}
    assert reasons["default-device-set"].startswith(
        "line 12: train(...) runs code the scanner does not follow"
    )


def test_a_name_rebound_to_its_own_attribute_is_worked_out_once() -> None:
    """pytorch/pytorch torch/optim/_muon.py, _zeropower_via_newtonschulz: ``ortho_grad =
    ortho_grad.T`` sent the question of which class ``ortho_grad`` is an instance of
    round the binding for ever (a RecursionError on the whole file)."""
    source = """\
        import torch


        def orthogonalize(grad, device):
            ortho_grad = grad.bfloat16()
            if grad.size(0) > grad.size(1):
                ortho_grad = ortho_grad.T
            return ortho_grad.to(device)
        """
    assert found_rules(source) == [(8, "tensor-to-device")]


def test_a_diffusers_pipeline_moved_is_named_as_a_pipeline() -> None:
    """huggingface/diffusers examples/text_to_image/train_text_to_image.py,
    log_validation: a pipeline is no torch.nn.Module, though its .to moves its modules."""
    source = """\
        import torch
        from diffusers import StableDiffusionPipeline


        def log_validation(args, accelerator, weight_dtype):
            pipeline = StableDiffusionPipeline.from_pretrained(
                args.pretrained_model_name_or_path,
                safety_checker=None,
                revision=args.revision,
                torch_dtype=weight_dtype,
            )
            pipeline = pipeline.to(accelerator.device)
            pipeline.set_progress_bar_config(disable=True)
        """
    (finding,) = [f for f in scan_text(source) if f.rule == "module-to"]
    assert finding.reason.startswith("pipeline is a Diffusers pipeline, whose .to moves")
    assert port_text(source) == textwrap.dedent(source)


def test_stable_baselines3_get_device_keeps_torchs_answer() -> None:
    """DLR-RM/stable-baselines3 stable_baselines3/common/utils.py, get_device: the
    torch.device it returns goes to torch code (policies, buffers), so whether CUDA is
    there must stay torch's question; the comparison of device types may become tj's."""
    source = """\
        from typing import Union

        import torch as th


        def get_device(device: Union[th.device, str] = "auto") -> th.device:
            if device == "auto":
                device = "cuda"
            device = th.device(device)

            if device.type == th.device("cuda").type and not th.cuda.is_available():
                return th.device("cpu")

            return device
        """
    assert port_text(source).splitlines()[11] == (
        '    if device.type == tj.device("cuda").type and not th.cuda.is_available():'
    )
    (query,) = [f for f in scan_text(source) if f.rule == "cuda-is-available"]
    assert "(<string>:9: device-from-spec)" in query.reason


def test_a_query_kept_in_an_exported_name_stays_torchs() -> None:
    """A public settings module (pixelock's cuda.py): DEVICE and NUM_GPU are there for
    the modules that import them, which hand them to torch."""
    source = """\
        # coding: utf-8

        import torch

        __all__ = ['DEVICE', 'NUM_GPU']

        DEVICE = 'cuda' if torch.cuda.is_available() else 'cpu'
        NUM_GPU = torch.cuda.device_count() if DEVICE == 'cuda' else 0
        """
    assert port_text(source) == textwrap.dedent(source)
    reasons = {f.rule: f.reason for f in scan_text(source)}
    assert reasons["cuda-is-available"].startswith("its answer is kept in DEVICE, which this")
    assert reasons["cuda-device-count"].startswith("its answer is kept in NUM_GPU, which this")


# -- A module that only binds names: its readers are the modules importing it -------------


def test_a_settings_modules_unread_device_stays_torchs() -> None:
    """A ``settings.py`` (shaped after BTP-public's) binds the device the training
    modules import and hand to torch (``model.to(settings.device)``); torch's ``.to``
    and factories refuse a ``tj.device``, so rewriting it would break them."""
    import torch

    with pytest.raises(TypeError):
        torch.zeros(1, device=tj.device("cpu"))  # what an importer would then do
    settings = """\
        import torch

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        """
    findings = scan_text(settings)
    held = [f for f in findings if f.rule == "device-select"]
    assert len(held) == 1 and "read nowhere in this file" in str(held[0].reason)
    assert "tj.device" not in port_text(settings)


def test_a_script_that_reads_its_device_is_still_rewritten() -> None:
    script = """\
        import torch

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        print(device)
        """
    assert "device = tj.device(" in port_text(script)


def test_a_settings_module_with_guarded_imports_is_still_a_module() -> None:
    settings = """\
        from typing import TYPE_CHECKING

        import torch

        try:
            import wandb
        except ImportError:
            wandb = None
        if TYPE_CHECKING:
            from collections.abc import Iterator

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        """
    held = [f for f in scan_text(settings) if f.rule == "device-select"]
    assert len(held) == 1 and "read nowhere in this file" in str(held[0].reason)
    assert "tj.device" not in port_text(settings)
    script = textwrap.dedent(settings) + 'if __name__ == "__main__":\n    print(device)\n'
    assert "tj.device" in port_text(script)


def test_a_device_a_module_exports_stays_torchs_though_the_module_runs_code() -> None:
    """``__all__ = ["DEVICE"]`` beside a top-level ``logging.basicConfig()``: the module
    is not only definitions, but its importers still read DEVICE (a runtime query kept in
    an exported name was held back already; the device itself was rewritten)."""
    module = """        import logging

        import torch

        __all__ = ["DEVICE"]
        logging.basicConfig()
        DEVICE = torch.device("cuda")
        """
    held = [f for f in scan_text(module) if f.rule.startswith("device")]
    assert held and all("read nowhere in this file" in str(f.reason) for f in held)
    assert "tj.device" not in port_text(module)
