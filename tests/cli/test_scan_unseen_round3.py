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
from tests.support.cli import port_text, scan_text

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
