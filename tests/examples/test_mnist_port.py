"""``examples/mnist_port.py``: the MNIST script ported line by line learns."""

from __future__ import annotations

from tests.support.examples import run_example


def test_mnist_port_learns_on_the_compute_device() -> None:
    out = run_example("mnist_port.py")
    assert "model on " in out
    accuracy = float(out.rsplit("test accuracy ", 1)[1].split()[0])
    assert accuracy > 0.9  # the synthetic digits are separable
