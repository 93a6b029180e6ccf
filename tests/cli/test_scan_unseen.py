"""``scan --diff`` on excerpts of public scripts the scanner was not written against.

Each input is a small excerpt of a real script (its repository and path in a comment),
cut down to the lines a finding depends on.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

import torch2jax_device as tj
from tests.support.cli import port_text, run_cli, scan_text

# huggingface/transformers src/transformers/modeling_flax_pytorch_utils.py,
# load_flax_checkpoint_in_pytorch_model (and the same call in the Flax model loaders).
FLAX_LOAD = """\
    import os
    import jax
    from flax.traverse_util import unflatten_dict
    from safetensors.flax import load_file as safe_load_file

    def load_flax_checkpoint(flax_checkpoint_path):
        flax_checkpoint_path = os.path.abspath(flax_checkpoint_path)
        flax_state_dict = safe_load_file(flax_checkpoint_path)
        flax_state_dict = unflatten_dict(flax_state_dict, sep=".")
        return jax.tree_util.tree_map(lambda x: x.dtype, flax_state_dict)

    print(load_flax_checkpoint("model.safetensors"))
    """


def test_a_safetensors_flax_load_is_not_renamed_to_a_load_onto_the_cpu(
    tmp_path: Path,
) -> None:
    import safetensors.flax
    import safetensors.numpy

    # What the rename would change: safetensors.flax's arrays are on JAX's default
    # device, free to follow it; tj.load_file's are committed to the CPU.
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file({"w": np.ones(3, np.float32)}, str(path))
    assert not safetensors.flax.load_file(str(path))["w"].committed
    assert tj.load_file(path)["w"].committed
    assert tj.load_file(path)["w"].devices() == {jax.local_devices(backend="cpu")[0]}

    assert port_text(FLAX_LOAD) == textwrap.dedent(FLAX_LOAD)
    (finding,) = scan_text(FLAX_LOAD)
    assert finding.rule == "load-safetensors"
    assert finding.reason.startswith("safetensors.flax loads onto JAX's default device")


def test_a_safetensors_numpy_load_is_not_renamed_to_a_load_onto_the_cpu() -> None:
    source = """\
        import jax.numpy as jnp
        import safetensors.numpy

        arrays = safetensors.numpy.load_file("model.safetensors")
        total = jnp.sum(arrays["w"])  # NumPy in, JAX's default device out
        """
    assert port_text(source) == textwrap.dedent(source)
    (finding,) = scan_text(source)
    assert finding.reason.startswith("safetensors.numpy gives NumPy arrays")


# Shaped after huggingface/transformers src/transformers/modeling_flax_pytorch_utils.py,
# load_pytorch_checkpoint_in_flax_state_dict: a torch checkpoint's tensors handed to
# jnp.asarray, which puts them on JAX's default device (the GPU where there is one).
TORCH_TO_FLAX = """\
    import jax.numpy as jnp
    import torch

    def load_pytorch_checkpoint_in_flax_state_dict(pt_path):
        pt_state_dict = torch.load(pt_path, map_location="cpu", weights_only=True)
        flax_state_dict = {}
        for pt_key, pt_tensor in pt_state_dict.items():
            flax_state_dict[tuple(pt_key.split("."))] = jnp.asarray(pt_tensor)
        return flax_state_dict

    print(load_pytorch_checkpoint_in_flax_state_dict("model.pt"))
    """


def test_a_torch_tensor_jnp_asarray_places_is_not_committed_to_the_cpu_first(
    tmp_path: Path,
) -> None:
    import torch

    # jnp.asarray puts a torch tensor on the default device, uncommitted; given the
    # array tj.load makes, it keeps it committed to the CPU, and JAX code after it
    # would run there.
    torch.save({"w": torch.ones(3)}, tmp_path / "model.pt")
    assert not jax.numpy.asarray(torch.load(tmp_path / "model.pt")["w"]).committed
    assert jax.numpy.asarray(tj.load(tmp_path / "model.pt")["w"]).committed

    assert port_text(TORCH_TO_FLAX) == textwrap.dedent(TORCH_TO_FLAX)
    (finding,) = scan_text(TORCH_TO_FLAX)
    assert finding.rule == "torch-load-map-location"
    assert "jnp.asarray(pt_tensor) puts a torch tensor on JAX's default device" in finding.reason


@pytest.mark.parametrize(
    "conversion",
    ["jnp.asarray(x)", "jnp.array(x)", "jax.device_put(x)", "jax.tree.map(jnp.asarray, x)"],
)
def test_every_conversion_onto_the_default_device_holds_a_cpu_rewrite_back(
    conversion: str,
) -> None:
    source = f"""\
        import jax
        import jax.numpy as jnp
        import numpy as np
        import torch

        x = torch.from_numpy(np.ones(3, np.float32))
        print(jnp.tanh({conversion}))
        """
    (finding,) = scan_text(source)
    assert finding.rule == "from-numpy"
    assert "puts a torch tensor on JAX's default device" in finding.reason


@pytest.mark.parametrize(
    "conversion",
    ["jnp.asarray(x, device=d)", "jax.device_put(x, d)", "jax.device_put(x, device=d)"],
)
def test_a_conversion_told_its_device_still_takes_the_rewrite(conversion: str) -> None:
    source = f"""\
        import jax
        import jax.numpy as jnp
        import numpy as np
        import torch

        d = jax.devices()[0]
        x = torch.from_numpy(np.ones(3, np.float32))
        print(jnp.tanh({conversion}))
        """
    assert "x = tj.to_jax(np.ones(3, np.float32))" in port_text(source).splitlines()


def test_the_keys_of_a_loaded_checkpoint_are_names_not_arrays() -> None:
    # huggingface/transformers src/transformers/modeling_flax_pytorch_utils.py,
    # convert_pytorch_state_dict_to_flax: the keys are split as strings.
    source = """\
        import torch
        from flax.traverse_util import unflatten_dict

        def load_pytorch_checkpoint_in_flax_state_dict(pt_path):
            pt_state_dict = torch.load(pt_path, map_location="cpu", weights_only=True)
            flax_state_dict = {}
            for pt_key, pt_tensor in pt_state_dict.items():
                flax_state_dict[tuple(pt_key.split("."))] = pt_tensor
            return unflatten_dict(flax_state_dict)

        print(load_pytorch_checkpoint_in_flax_state_dict("model.pt"))
        """
    assert (
        '    pt_state_dict = tj.load(pt_path, map_location="cpu")' in port_text(source).splitlines()
    )


def test_a_value_reassigned_from_itself_is_not_read_by_its_own_rewrite() -> None:
    # pytorch/examples word_language_model/main.py (the 2017 version): ``data =
    # data.cuda()`` reads the old ``data``, not the new one; nothing JAX reads the new.
    source = """\
        import torch

        def batchify(data, bsz):
            nbatch = data.size(0) // bsz
            data = data.narrow(0, 0, nbatch * bsz)
            data = data.view(bsz, -1).t().contiguous()
            if torch.cuda.is_available():
                data = data.cuda()
            return data

        print(batchify(torch.arange(8.0), 2))
        """
    assert port_text(source) == textwrap.dedent(source)
    reasons = {f.rule: f.reason for f in scan_text(source)}
    assert reasons["tensor-cuda"].startswith("no JAX code reads the result")


def test_a_value_reassigned_from_itself_in_a_loop_is_read_by_the_next_iteration() -> None:
    source = """\
        import jax.numpy as jnp
        import torch
        import torch2jax_device as tj

        x = torch.ones(3)
        for _ in range(2):
            print(jnp.tanh(tj.to_jax(x)))
            x = x.to("cpu")
        """
    assert '    x = tj.to_device(x, "cpu")' in port_text(source).splitlines()


def test_from_numpy_of_an_array_written_later_is_not_rewritten() -> None:
    import torch

    # The oracle: torch.from_numpy always shares the array; tj.to_jax copies one that is
    # not 64-byte aligned, so a later write shows through torch's tensor only.
    array = np.zeros(17, np.float32)[1:]
    tensor, converted = torch.from_numpy(array), tj.to_jax(array)
    array[0] = 5.0
    assert float(tensor[0]) == 5.0 and float(converted[0]) == 0.0

    source = """\
        import numpy as np
        import torch
        import torch2jax_device as tj

        window = np.zeros((16, 63), np.float32)
        for frame in range(3):
            window[:-1] = window[1:]
            window[-1] = frame
            print(tj.to_device(torch.from_numpy(window), "cpu").sum())
        """
    assert port_text(source) == textwrap.dedent(source)
    (finding,) = scan_text(source)
    assert finding.reason.startswith("line 7: window[:-1] = ... writes into it")


# Shaped after a public sliding-window gesture classifier (SlidingWindowGestureBuffer:
# the window is an attribute shifted in place on every frame).
WINDOW = """\
    import numpy as np
    import torch
    import torch2jax_device as tj

    class SlidingWindow:
        def __init__(self):
            self.buffer = np.zeros((16, 63), dtype=np.float32)

        def push(self, kp):
            self.buffer[:-1] = self.buffer[1:]
            self.buffer[-1] = kp
            tensor_in = torch.from_numpy(self.buffer)
            return tj.to_device(tensor_in, "cpu")
    """


@pytest.mark.parametrize(
    ("held", "why"),
    [
        (WINDOW, "the scanner cannot tell what else holds self.buffer"),
        (
            "import numpy as np\nimport torch\nimport torch2jax_device as tj\n"
            "a = np.ones(3)\nt = tj.to_device(torch.from_numpy(a), 'cpu')\na += 1\n",
            "line 6: a += 1 writes into it",
        ),
        (
            "import numpy as np\nimport torch\nimport torch2jax_device as tj\n"
            "a = np.ones(3)\nt = tj.to_device(torch.from_numpy(a), 'cpu')\nnp.copyto(a, 2)\n",
            "passed to np.copyto(a, 2), which may write into it",
        ),
        (
            "import numpy as np\nimport torch\nimport torch2jax_device as tj\n"
            "a = np.ones(3)\nt = tj.to_device(torch.from_numpy(a), 'cpu')\nrefill(a)\n",
            "passed to refill(a), which may write into it",
        ),
        (
            "import numpy as np\nimport torch\nimport torch2jax_device as tj\n"
            "a = np.ones(3)\nt = tj.to_device(torch.from_numpy(a), 'cpu')\na[1:].fill(0)\n",
            "a[1:].fill(...) writes into it",
        ),
    ],
)
def test_every_write_into_a_shared_array_holds_from_numpy_back(held: str, why: str) -> None:
    (finding,) = scan_text(held)
    assert finding.rule == "from-numpy" and why in finding.reason


@pytest.mark.parametrize(
    "argument", ["a", "np.ones(3)", "a.astype(np.float32)", "np.load('a.npy')"]
)
def test_from_numpy_of_an_array_nothing_writes_is_rewritten(argument: str) -> None:
    source = f"""\
        import numpy as np
        import torch
        import torch2jax_device as tj

        a = np.ones(3)
        print(np.mean(a), len(a))
        t = tj.to_device(torch.from_numpy({argument}), "cpu")
        print(np.mean(a))
        """
    assert f't = tj.to_device(tj.to_jax({argument}), "cpu")' in port_text(source).splitlines()


def test_a_move_of_a_tensor_written_later_is_not_rewritten() -> None:
    import torch

    # The oracle: x.cpu() of a CPU tensor is x itself; tj.to_device copies a buffer that
    # is not 64-byte aligned, so a later write shows through torch's result only.
    x = torch.zeros(1025)[1:]
    kept, moved = x.cpu(), tj.to_device(x, "cpu")
    x[0] = 5.0
    assert float(kept[0]) == 5.0 and float(moved[0]) == 0.0

    source = """\
        import torch
        import torch2jax_device as tj

        x = torch.zeros(4)
        y = x.cpu()
        x.add_(1)
        print(tj.to_jax(y))
        """
    assert port_text(source) == textwrap.dedent(source)
    (finding,) = scan_text(source)
    assert finding.reason.startswith("line 6: x.add_(...) writes into it: x.cpu() is the tensor")


def test_a_move_into_its_own_name_is_rewritten_whatever_reads_the_name_later() -> None:
    """``x = x.to(device)`` rebinds ``x``: a later call that may write into ``x`` writes
    into the result, never into the tensor moved (docs/tutorial.md's halfway port)."""
    source = """\
        import torch
        from flax import nnx
        import torch2jax_device as tj

        @nnx.jit
        def step(model, x, y):
            return model(x) - y

        def train(model, loader, device):
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                step(model, x, y)
        """
    assert (
        "        x, y = tj.to_device(x, device), tj.to_device(y, device)"
        in port_text(source).splitlines()
    )


@pytest.mark.parametrize(
    ("statement", "rebinds"),
    [
        ("x = x.to(d)", True),
        ("x, y = x.to(d), y.to(d)", True),
        ("[x, y] = y.to(d), x.to(d)", True),
        ("y = x.to(d)", False),
        ("x[0] = x.to(d)", False),  # a write into x, not a new x
        ("self.x = x.to(d)", False),
    ],
)
def test_only_a_new_binding_of_the_name_moved_counts_as_rebinding_it(
    statement: str, rebinds: bool
) -> None:
    from torch2jax_device.porting._plan import _rebinds

    node = ast.parse(statement).body[0]
    receiver = ast.Name("x", ast.Load())
    assert _rebinds(node, receiver) is rebinds


def test_a_script_python_no_longer_parses_is_left_out_with_the_line(tmp_path: Path) -> None:
    # pytorch/examples imagenet/main.py (2017): ``async`` is a keyword since Python 3.7.
    script = tmp_path / "main.py"
    script.write_text(
        "import torch\n\n"
        "def train(train_loader):\n"
        "    for i, (input, target) in enumerate(train_loader):\n"
        "        target = target.cuda(async=True)\n"
    )
    status, _, err = run_cli("scan", str(script))
    assert status == 2
    assert f"cannot scan {script}: it is not valid Python 3." in err
    assert "line 5, column 30: target = target.cuda(async=True))" in err
