"""``scan DIR`` follows ``from models import *`` to the class a name comes from.

Real projects import their models through a package that re-exports its modules with
``import *`` (kuangliu/pytorch-cifar: ``from models import *`` in ``main.py``,
``from .lenet import *`` in ``models/__init__.py``). Once a newcomer ports the model to
Flax NNX, ``net = LeNet(); net = net.to(device)`` is an NNX move that ``--diff``
rewrites as it does with ``from models.lenet import LeNet``; a torch model reached the
same way is known to be torch. A name that no module, or more than one, exports, or
that a computed ``__all__`` may hide, stays unknown, and the move is held back. Where
the trainer then wraps the model in ``torch.nn.DataParallel`` on a GPU (as that
``main.py`` does), the move is held back naming the line that makes it torch's.
"""

from __future__ import annotations

import pytest

from torch2jax_device.porting import scanner

NNX_LENET = (
    "from flax import nnx\n\n\nclass LeNet(nnx.Module):\n"
    "    def __init__(self):\n        self.fc = nnx.Linear(2, 2, rngs=nnx.Rngs(0))\n"
)
TORCH_LENET = (
    "from torch import nn\n\n\nclass LeNet(nn.Module):\n"
    "    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(2, 2)\n"
)
MAIN = (
    "import torch\nfrom models import *\n\n"
    "device = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
    "net = LeNet()\nnet = net.to(device)\nprint(net)\n"
)
PACKAGE = {"models/__init__.py": "from .lenet import *\nfrom .vgg import *\n"}
VGG = "from torch import nn\n\n\nclass VGG(nn.Module):\n    pass\n"


def _move(sources: dict[str, str]) -> scanner.Finding:
    (move,) = [f for f in scanner.scan_sources(sources)["main.py"] if f.rule == "module-to"]
    return move


@pytest.mark.parametrize(
    "layout",
    [
        {**PACKAGE, "models/lenet.py": NNX_LENET, "models/vgg.py": VGG},
        {"models.py": "from lenet import *\n", "lenet.py": NNX_LENET},
        {**PACKAGE, "models/lenet.py": "__all__ = ['LeNet']\n" + NNX_LENET, "models/vgg.py": VGG},
    ],
    ids=["package-re-export", "module-chain", "listed-in-__all__"],
)
def test_an_nnx_model_star_imported_through_the_project_is_moved_with_tj(
    layout: dict[str, str],
) -> None:
    move = _move({"main.py": MAIN, **layout})
    assert move.fixable, move.reason
    assert move.replacement == "tj.to_device(net, device)"


def test_a_torch_model_star_imported_through_the_project_is_known_to_be_torch() -> None:
    move = _move({"main.py": MAIN, **PACKAGE, "models/lenet.py": TORCH_LENET, "models/vgg.py": VGG})
    assert not move.fixable
    assert "net is a torch.nn.Module" in move.reason


@pytest.mark.parametrize(
    "layout",
    [
        # two modules export it: which one wins depends on the order of the imports
        {**PACKAGE, "models/lenet.py": NNX_LENET, "models/vgg.py": VGG + TORCH_LENET},
        # __all__ leaves it out: import * does not bind it
        {**PACKAGE, "models/lenet.py": "__all__ = ['Other']\n" + NNX_LENET, "models/vgg.py": VGG},
        # __all__ is computed: what it exports is not known
        {
            **PACKAGE,
            "models/lenet.py": "__all__ = [n for n in dir() if n[0] != '_']\n" + NNX_LENET,
            "models/vgg.py": VGG,
        },
        # the package is not scanned: third-party code
        {"models/lenet.py": NNX_LENET},
    ],
    ids=["exported-twice", "left-out-of-__all__", "computed-__all__", "not-scanned"],
)
def test_a_star_imported_name_the_scanner_cannot_place_holds_the_move_back(
    layout: dict[str, str],
) -> None:
    move = _move({"main.py": MAIN, **layout})
    assert not move.fixable
    assert "cannot tell it is a Flax NNX module" in move.reason


def test_a_ported_model_a_gpu_branch_wraps_for_torch_names_that_line() -> None:
    """pytorch-cifar's ``main.py`` after the port: ``net`` is the NNX LeNet where it is
    moved, and a torch ``DataParallel`` on a GPU: the reason says so, not "net is a
    torch.nn.Module" (the user has just ported it)."""
    main = MAIN.replace(
        "print(net)\n", "if device == 'cuda':\n    net = torch.nn.DataParallel(net)\nprint(net)\n"
    )
    move = _move({"main.py": main, **PACKAGE, "models/lenet.py": NNX_LENET, "models/vgg.py": VGG})
    assert not move.fixable
    assert move.reason.startswith(
        "net is a Flax NNX module at one assignment, and line 8 makes it a torch.nn.Module "
        "(torch.nn.DataParallel(net))"
    ), move.reason
