"""``examples/mnist_port.py``: the MNIST script ported line by line learns."""

from __future__ import annotations

from tests.support.examples import ExampleRunner


def test_mnist_port_learns_on_the_compute_device(examples: ExampleRunner) -> None:
    # One epoch of 64 steps of 16 on 1,024 images (the default: 2 epochs of 32 steps of
    # 128) takes a model from chance (0.1) to ~0.97, with half the convolution work of
    # 64 steps of 32 on 2,048 images.
    out = examples.run(
        "mnist_port.py", "--epochs", "1", "--train-size", "1024", "--batch-size", "16"
    )
    assert "model on " in out
    assert out.count(" loss ") == 4  # steps 0, 16, 32, 48 of one epoch
    accuracy = float(out.rsplit("test accuracy ", 1)[1].split()[0])
    assert accuracy > 0.9  # the synthetic digits are separable
