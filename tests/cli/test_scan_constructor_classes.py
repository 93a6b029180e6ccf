"""``scan --diff`` on a module handed to a class's constructor, by generated cases.

The class the newcomer ports of real projects taught (``test_scan_newcomer_ports.py``):
minGPT's ``Trainer(config, model, data)`` keeps ``model`` in ``self.model`` and moves it
with ``self.model = self.model.to(self.device)``. The move becomes ``tj.to_device`` only
when every construction of the class the scanner sees hands it a Flax NNX module (in the
file, or in the modules of the project importing it), and nothing can make the class
otherwise: subclassed, handed on, made by ``cls(...)``, read by ``isinstance``, called
with ``*args``. Each case is the same program with the model torch's (a twin that must
never move) and NNX's.
"""

from __future__ import annotations

import pytest

from torch2jax_device.porting import scanner

_TRAINER = """\
import torch


class Trainer:
    @staticmethod
    def get_default_config():
        return {{}}

    def __init__(self, config, model, data=None):
        self.config = config
        self.model = model
        self.device = "cpu"
        self.model = self.model.to(self.device)
{extra}
"""
_MODELS = {
    "nnx": "from flax import nnx\n\n\nclass Net(nnx.Module):\n    def __init__(self):\n"
    "        self.l = nnx.Linear(2, 2, rngs=nnx.Rngs(0))\n",
    "torch": "from torch import nn\n\n\nclass Net(nn.Module):\n    def __init__(self):\n"
    "        super().__init__()\n        self.l = nn.Linear(2, 2)\n",
}
_CALLS = {
    "positional": "Trainer(config, Net())",
    "keyword": "Trainer(config, model=Net(), data=None)",
    "named": "model = Net()\ntrainer = Trainer(config, model)",
}
#: What else may make or hand on the class: (code in the trainer's module, in main.py).
_ESCAPES = {
    "none": ("", ""),
    "static attribute read": ("", "defaults = Trainer.get_default_config()"),
    "subclassed": ("", "class Mine(Trainer):\n    pass"),
    "handed on": ("", "factory = Trainer"),
    "made by cls(...)": (
        "\n    @classmethod\n    def build(cls, config):\n        return cls(config, None)\n",
        "",
    ),
    "isinstance": ("", "isinstance(None, Trainer)"),
    "*args": ("", "extra = (config, Net())\nTrainer(*extra)"),
}


def _constructor_case(framework: str, call: str, escape: str, where: str) -> dict[str, str]:
    inside, beside = _ESCAPES[escape]
    trainer = _TRAINER.format(extra=inside)
    main = f"{_CALLS[call]}\n{beside}\n"
    if where == "same file":
        return {"trainer.py": f"{trainer}\n\n{_MODELS[framework]}\n\nconfig = {{}}\n{main}"}
    head = "from model import Net\nfrom trainer import Trainer\n\nconfig = {}\n"
    return {"trainer.py": trainer, "model.py": _MODELS[framework], "main.py": head + main}


@pytest.mark.parametrize("where", ["same file", "importing module"])
@pytest.mark.parametrize("escape", sorted(_ESCAPES))
@pytest.mark.parametrize("call", sorted(_CALLS))
@pytest.mark.parametrize("framework", sorted(_MODELS))
def test_a_module_handed_to_a_constructor_moves_only_when_every_construction_is_nnx(
    framework: str, call: str, escape: str, where: str
) -> None:
    sources = _constructor_case(framework, call, escape, where)
    found = scanner.scan_sources(sources)["trainer.py"]
    (move,) = [f for f in found if f.rule == "module-to"]
    ported = framework == "nnx" and escape in ("none", "static attribute read")
    assert (move.rewrite is not None) == ported, (move.reason, sources)
    if not ported:
        assert move.reason, sources
