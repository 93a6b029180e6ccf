"""``scan --diff`` on excerpts of public libraries and scripts the scanner was not
written against (a second round after ``test_scan_unseen.py``).

Each input is a small excerpt of a real file (its repository and path in a comment), cut
down to the lines a finding depends on, or a case shaped after one.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import jax
import pytest

import torch2jax_device as tj
from tests.support.cli import port_text, scan_text
from torch2jax_device.porting import scanner

# nshepperd/jaxtorch jaxtorch/pt.py, load: a checkpoint's tensors turned into JAX arrays
# by a function of the file's own, handed to a tree map.
JAXTORCH_LOAD = """\
    import jax
    import jax.numpy as jnp
    import torch

    @torch.no_grad()
    def load(f):
        \"\"\"Converts torch.Tensor back to jax arrays after loading.\"\"\"
        def from_torch(x):
            if isinstance(x, torch.Tensor):
                return jnp.asarray(x)
            return x
        torch_dict = torch.load(f, map_location='cpu')
        return jax.tree_util.tree_map(from_torch, torch_dict)
    """


def test_a_tree_map_hands_each_leaf_to_its_function(tmp_path: Path) -> None:
    import torch

    # What the rewrite would change: from_torch converts torch tensors onto JAX's
    # default device, uncommitted; given tj.load's arrays (committed to the CPU) its
    # isinstance test is False and they stay where tj.load put them.
    torch.save({"w": torch.ones(3)}, tmp_path / "model.pt")
    loaded = torch.load(tmp_path / "model.pt", map_location="cpu")
    assert not jax.numpy.asarray(loaded["w"]).committed
    ported = tj.load(tmp_path / "model.pt", map_location="cpu")
    assert not isinstance(ported["w"], torch.Tensor) and ported["w"].committed

    assert port_text(JAXTORCH_LOAD) == textwrap.dedent(JAXTORCH_LOAD)
    (finding,) = scan_text(JAXTORCH_LOAD)
    assert finding.rule == "torch-load-map-location"
    assert "line 9: passed to isinstance(x, torch.Tensor)" in finding.reason


@pytest.mark.parametrize(
    ("mapped", "why"),
    [
        ("jax.tree.map(lambda t: t.numpy(), state)", "t.numpy() calls a torch method on it"),
        ("jax.tree.map(lambda t: jnp.asarray(t), state)", "puts a torch tensor on JAX's default"),
        ("jax.tree.map(convert, state)", "hands its leaves to convert"),
        ("jax.tree.map(torch.as_tensor, state)", "hands its leaves to torch.as_tensor"),
        # jax.tree_map: the name older code (jaxtorch's first versions) calls
        ("jax.tree_map(lambda t: t.numpy(), state)", "t.numpy() calls a torch method on it"),
        (
            "jax.tree_util.tree_map_with_path(lambda p, t: t.numpy(), state)",
            "t.numpy() calls a torch method on it",
        ),
        # Functions that hand back the leaves they were given: what follows reads them.
        ("sum(x.numel() for x in jax.tree_util.tree_leaves(state))", "x.numel() calls a torch"),
        ("flatten_dict(state)['w'].numpy()", "calls a torch method on it"),
        ("jax.block_until_ready(state)['w'].numpy()", "calls a torch method on it"),
        ("jax.tree.map(jnp.tanh, state, is_leaf=is_tensor)", "hands its subtrees to is_leaf"),
        ("jax.tree.map(lambda a, b: a + b, other, state)", "combines it with a value that may"),
        ("jax.tree.map(lambda a, b: a, *[state, state])", "hands its leaves to lambda a, b: a"),
        ("jax.tree.map(lambda a: a, tree=state)", "hands its leaves to lambda a: a"),
    ],
)
def test_a_tree_map_whose_function_needs_torch_holds_the_load_back(mapped: str, why: str) -> None:
    source = f"""\
        import jax
        import jax.numpy as jnp
        import torch
        from flax.traverse_util import flatten_dict
        from helpers import convert, is_tensor, other

        state = torch.load("model.pt", map_location="cpu")
        print({mapped})
        """
    (finding,) = scan_text(source)
    assert finding.rule == "torch-load-map-location" and why in finding.reason


@pytest.mark.parametrize(
    "mapped",
    [
        "jnp.sum(jax.tree.map(lambda t: t * 2, state)['w'])",
        "jnp.sum(jax.tree.map(double, state)['w'])",
        "jax.tree.map(jnp.tanh, state)",
        "jax.tree.map(print, state)",
        "jax.tree.map_with_path(lambda path, t: jnp.tanh(t), state)",
        "jnp.sum(jax.tree_util.tree_leaves(state)[0])",
    ],
)
def test_a_tree_map_whose_function_takes_jax_arrays_keeps_the_rewrite(
    mapped: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    source = f"""\
        import jax
        import jax.numpy as jnp
        import torch

        def double(x):
            return x * 2

        state = torch.load("model.pt", map_location="cpu")
        print({mapped})
        """
    ported = port_text(source)
    assert 'state = tj.load("model.pt", map_location="cpu")' in ported.splitlines()
    # The ported program runs: the patch compiles, and the JAX code takes tj.load's arrays.
    torch.save({"w": torch.ones(3)}, tmp_path / "model.pt")
    monkeypatch.chdir(tmp_path)
    exec(compile(ported, "ported.py", "exec"), {"__name__": "ported"})


def test_a_tensor_moved_from_its_holder_is_the_holders_tensor() -> None:
    import torch

    # The oracle: x.cpu() of a CPU tensor is the tensor itself, whoever holds it; a
    # later write through the holder shows through torch's result only.
    batch = {"x": torch.zeros(1025)[1:]}
    kept, moved = batch["x"].cpu(), tj.to_device(batch["x"], "cpu")
    batch["x"][0] = 5.0
    assert float(kept[0]) == 5.0 and float(moved[0]) == 0.0


@pytest.mark.parametrize(
    ("source", "why"),
    [
        (
            """\
            def step(batch, device):
                x = batch["x"].to(device)
                print(jnp.tanh(x))
                batch["x"].add_(1)
            """,
            "line 7: batch['x'].add_(...) writes into batch['x']",
        ),
        (
            """\
            def last(outputs):
                y = outputs[0].cpu()
                print(jnp.sum(y))
                outputs[0][1:] = 0
            """,
            "line 7: outputs[0][1:] = ... writes into outputs[0]",
        ),
        (
            """\
            def step(batch, device):
                x = batch["x"].to(device)
                print(jnp.tanh(x))
                batch["x"] += 1
            """,
            "line 7: batch['x'] += 1 writes into batch['x']",
        ),
        (
            """\
            def step(batch, device, model):
                x = batch["x"].to(device)
                print(jnp.tanh(x))
                model(**batch)
            """,
            "line 7: passed to model(**batch), which may write into batch['x'] through batch",
        ),
        (
            """\
            def step(batch, keys, device):
                for key in keys:
                    x = batch[key].to(device)
                    print(jnp.tanh(x))
                    batch["x"].zero_()
            """,
            "line 8: batch['x'].zero_(...) writes into batch[key]",
        ),
        (
            """\
            def step(batch, device):
                x = batch["x"].to(device)
                print(jnp.tanh(x))
                for value in batch.values():
                    value.zero_()
            """,
            "batch.values may reach batch['x'] through batch",
        ),
        (
            """\
            def step(batch, device):
                x = batch[0].to(device)
                print(jnp.tanh(x))
                for t in batch:
                    t.zero_()
            """,
            "line 7: iterating over batch hands on what it holds, batch[0] among them",
        ),
        (
            # Shaped after facebookresearch/segment-anything segment_anything/predictor.py:
            # the features a method reads are set and reset by the class's other methods.
            """\
            class SamPredictor:
                def get_feature(self):
                    return jnp.asarray(self.features.cpu(), device=jax.devices()[0])

                def reset_image(self):
                    self.features.zero_()
            """,
            "line 9: self.features.zero_(...) writes into self.features",
        ),
        (
            # transformers' ModelOutput: outputs.logits is outputs[0].
            """\
            def last(outputs):
                y = outputs[0].cpu()
                print(jnp.sum(y))
                outputs.logits.zero_()
            """,
            "line 7: outputs.logits.zero_(...) writes into outputs[0]",
        ),
        (
            # The same method's earlier line runs again on its next call.
            """\
            class Window:
                def push(self, frame):
                    self.buf[:-1] = self.buf[1:].clone()
                    return jnp.asarray(self.buf.cpu(), device=jax.devices()[0])
            """,
            "line 6: self.buf[:-1] = ... writes into self.buf",
        ),
    ],
)
def test_a_move_through_a_holder_written_later_is_not_rewritten(source: str, why: str) -> None:
    header = "import jax\nimport jax.numpy as jnp\nimport torch\n"
    source = header + textwrap.dedent(source)
    moves = [f for f in scanner.scan_source(source) if f.rule in ("tensor-to-device", "tensor-cpu")]
    assert len(moves) == 1, moves
    assert moves[0].reason is not None and why in moves[0].reason


def test_a_move_through_a_holder_nothing_writes_is_rewritten() -> None:
    source = """\
        import jax
        import jax.numpy as jnp
        import torch

        def step(batch, device):
            x = batch["x"].to(device)
            y = batch["y"].to(device)
            print(jnp.tanh(x), jnp.tanh(y), len(batch), batch["z"])
            batch["z"] += 1
            batch["y"] = None

        class Cache:
            def __init__(self):
                self.features = torch.zeros(3)
                self.model = None

            def read(self):
                return jnp.asarray(self.features.cpu(), device=jax.devices()[0])

            def reset(self):
                self.model(3)
                self.features = torch.ones(3)
                return self
        """
    lines = port_text(source).splitlines()
    assert '    x = tj.to_device(batch["x"], device)' in lines
    assert '    y = tj.to_device(batch["y"], device)' in lines
    assert (
        '        return jnp.asarray(tj.to_device(self.features, "cpu"), device=jax.devices()[0])'
        in lines
    )


@pytest.mark.parametrize(
    ("imports", "made"),
    [
        ("import paddle", "paddle.to_tensor([1.0, 2.0])"),
        ("import tensorflow as tf", "tf.ones([2])"),
        ("import cupy as cp", "cp.ones(2)"),
        ("import oneflow as flow", "flow.ones(2)"),
    ],
)
def test_another_frameworks_moves_are_not_torch_idioms(imports: str, made: str) -> None:
    # Paddle (PaddlePaddle/PaddleNLP's scripts call .cuda() and .cpu() on paddle
    # tensors), TensorFlow and OneFlow tensors have .cpu()/.cuda()/.to() of their own:
    # rewritten into tj.to_device they would be handed to a function that takes torch
    # tensors and JAX arrays.
    source = f"""\
        import jax
        import jax.numpy as jnp
        {imports}

        @jax.jit
        def f(x):
            return jnp.tanh(x)

        x = {made}
        print(f(x.cpu()), f(x.cuda()), f(x.to("gpu")), x.device, x.cpu().device)
        """
    assert scan_text(source) == []
    assert port_text(source) == textwrap.dedent(source)


def test_a_torch_tensor_made_from_another_frameworks_array_is_still_torchs() -> None:
    source = """\
        import cupy as cp
        import torch

        t = torch.from_numpy(cp.asnumpy(cp.ones(3))).cuda()
        """
    assert [f.rule for f in scan_text(source)] == ["from-numpy", "tensor-cuda"]


def test_a_numpy_view_of_the_result_is_followed() -> None:
    import numpy as np
    import torch

    # The oracle: NumPy's view of a CPU tensor is writable (it writes into the tensor);
    # its view of a JAX array is read-only.
    assert np.asarray(torch.zeros(3).cpu()).flags.writeable
    assert not np.asarray(tj.to_device(torch.zeros(3), "cpu")).flags.writeable

    source = """\
        import jax
        import numpy as np
        import torch

        def export(x, device):
            y = x.cpu()
            print(jax.device_put(y, device))
            a = np.asarray(y)
            a[0] = 1.0
            return a
        """
    (finding,) = scan_text(source)
    assert finding.rule == "tensor-cpu"
    assert "line 9: a[0] = ... writes into it (arrays are immutable)" in finding.reason


def test_a_move_of_a_view_is_a_move_of_the_tensor_viewed() -> None:
    import torch

    # The oracle: x.detach().cpu() of a CPU tensor shares x's memory (a training loop's
    # snapshot of a weight sees the optimizer's in-place update); tj.to_device copies a
    # buffer that is not 64-byte aligned.
    w = torch.zeros(1025)[1:]
    kept, moved = w.detach().cpu(), tj.to_device(w.detach(), "cpu")
    w.add_(1.0)
    assert float(kept[0]) == 1.0 and float(moved[0]) == 0.0


@pytest.mark.parametrize(
    ("moved", "why"),
    [
        ("w.detach().cpu()", "line 10: w.add_(...) writes into it"),
        ("w.T.cpu()", "line 10: w.add_(...) writes into it"),
        ("w.float().to(device)", "line 10: w.add_(...) writes into it"),
        ("w.view(-1)[0].cpu()", "line 10: w.add_(...) writes into it"),
        ("self.w.detach().cpu()", "line 13: self.w.mul_(...) writes into self.w"),
        ("self.w.data.cpu()", "line 13: self.w.mul_(...) writes into self.w"),
    ],
)
def test_a_view_moved_then_written_through_the_tensor_is_not_rewritten(
    moved: str, why: str
) -> None:
    source = f"""\
        import jax
        import jax.numpy as jnp
        import torch

        class Snapshot:
            def take(self, w, device):
                snapshot = {moved}
                print(jax.device_put(snapshot, jax.devices()[0]))
                if w is not None:
                    w.add_(1.0)

            def step(self):
                self.w.mul_(0.5)
        """
    moves = [f for f in scan_text(source) if f.rule.startswith("tensor-") and f.line == 7]
    assert moves and all(f.reason is not None for f in moves)
    assert any(why in str(f.reason) for f in moves), [f.reason for f in moves]


def test_a_view_moved_into_its_own_name_is_rewritten() -> None:
    # x = x.detach().to(device) rebinds x: later reads of x are the result's.
    source = """\
        import jax
        import torch

        @jax.jit
        def step(x):
            return x * 2

        def evaluate(x, device):
            x = x.detach().to(device)
            return step(x)
        """
    assert "    x = tj.to_device(x.detach(), device)" in port_text(source).splitlines()


# A Flax MNIST trainer fed by torch's DataLoader (main.py of a public JAX project; the
# index names no repository), the JAX documentation's way of loading data: the torch
# generator orders the samples, and nothing of it moves to JAX.
FLAX_TRAINER_LOADER = """\
    import torch
    from torch.utils.data import DataLoader, random_split
    from torchvision import datasets, transforms

    def make_dataloaders(batch_size=128, num_workers=2, drop_last=True, seed=0):
        g = torch.Generator()
        g.manual_seed(seed)
        tfm = transforms.ToTensor()
        train_ds = datasets.MNIST(root="./data", train=True, download=True, transform=tfm)
        seeded = torch.Generator().manual_seed(42)
        train_ds, val_ds = random_split(train_ds, [50000, 10000], generator=seeded)
        train_loader = DataLoader(
            train_ds, batch_size=batch_size, shuffle=True, generator=g, drop_last=drop_last
        )
        return train_loader
    """


def test_a_generator_that_only_orders_torchs_data_is_kept() -> None:
    generators = [f for f in scan_text(FLAX_TRAINER_LOADER) if f.rule == "generator-device"]
    assert [f.line for f in generators] == [6, 7, 10]  # g, g.manual_seed, the seeded one
    for finding in generators:
        assert finding.reason is not None
        assert finding.reason.startswith("it seeds torch's data loading")


def test_a_generator_that_draws_numbers_keeps_the_advice() -> None:
    source = """\
        import torch

        g = torch.Generator()
        g.manual_seed(0)
        order = torch.randperm(10, generator=g)
        """
    generators = [f for f in scan_text(source) if f.rule == "generator-device"]
    assert len(generators) == 2
    assert all(not (f.reason or "").startswith("it seeds") for f in generators)


def test_a_class_of_many_methods_keeps_every_rewrite_of_its_holders() -> None:
    """The reads of ``self`` over a class are listed once, not once per ``self.x.cpu()``:
    60 moves in a class whose other 100 methods read ``self`` 10 times each are all
    rewritten (charged per move, they spent the file's budget and were held back)."""
    lines = ["import jax", "import jax.numpy as jnp", "import torch", "", "class Big:"]
    for i in range(60):
        lines += [
            f"    def read{i}(self):",
            f"        return jnp.asarray(self.f{i}.cpu(), device=jax.devices()[0])",
        ]
    for i in range(100):
        lines += [
            f"    def other{i}(self):",
            "        " + "; ".join(f"a{j} = self.g{j}" for j in range(10)),
        ]
    moves = [f for f in scan_text("\n".join(lines) + "\n") if f.rule == "tensor-cpu"]
    assert len(moves) == 60 and all(f.fixable for f in moves), {f.reason for f in moves}
