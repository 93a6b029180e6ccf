"""``get_slice(name)[index]`` with lists, arrays, tensors or bools in the index: torch's rules.

safetensors 0.8 reads the whole tensor for such an index and indexes it as torch does
(``[[0, 2]]`` picks rows 0 and 2, ``[[0, 1], [1, 2]]`` the elements ``(0, 1)`` and
``(1, 2)``, a list of bools is a mask, ``[[0.5]]`` truncates to row 0). Torch's rules for
lists (a list holding sequences reads as a tuple, floats truncate, bools mask) differ
from NumPy's, so torch itself decides: the index is applied to one expanded ``arange``
per axis (no copy of the tensor's size is made), which gives each picked element's
coordinates, and NumPy gathers those from the tensor read whole. Nothing here knows
JAX.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..detect import import_torch, is_torch_tensor
from ..errors import InvalidIndexError

__all__ = ["Gather", "is_advanced"]


def is_advanced(index: Any) -> bool:
    """Whether ``index`` holds a list, range, array, tensor or bool: torch's advanced index.

    A bare empty list is basic: it selects nothing along the first axis (``[0:0]``), for
    every framework of safetensors.
    """
    if isinstance(index, list) and not index:
        return False
    items = index if isinstance(index, tuple) else (index,)
    return any(
        isinstance(item, (list, range, tuple, np.ndarray, bool, np.bool_))
        or is_torch_tensor(item)
        or hasattr(item, "__jax_array__")
        or type(item).__module__.startswith("jax")
        for item in items
    )


class Gather:
    """Where ``tensor[index]``'s elements are in a tensor of ``shape``, by torch's rules.

    Raises:
        InvalidIndexError: torch refuses the index on this shape (out of range, a mask
            of another shape, too many indices), naming the fix.
        MissingFrameworkError: torch is not installed (it decides what the index means).
    """

    def __init__(self, shape: tuple[int, ...], index: Any, name: str) -> None:
        spelled = f"get_slice({name!r})[{index!r:.80}]"
        torch = import_torch(f"{spelled} (a list, array or tensor index follows torch's rules)")
        given = _for_torch(index)
        try:
            if shape:
                axes = [
                    torch.arange(size).reshape(
                        [size if i == axis else 1 for i in range(len(shape))]
                    )
                    for axis, size in enumerate(shape)
                ]
                picked = [axis.expand(shape)[given] for axis in axes]
            else:  # a 0-d tensor: the picked elements are all its one element
                picked = [torch.zeros((), dtype=torch.int64)[given]]
        except (IndexError, TypeError, ValueError, RuntimeError) as error:
            raise InvalidIndexError(
                f"{spelled} on shape {list(shape)}: {error} (torch and safetensors raise "
                f"{type(error).__name__}). Fix: index within the tensor's shape, as for the "
                "torch tensor get_tensor gives"
            ) from None
        self.shape: tuple[int, ...] = tuple(picked[0].shape)
        self._coordinates = tuple(part.numpy() for part in picked) if shape else None

    def __call__(self, whole: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The picked elements of ``whole`` (the tensor, read whole), in a new array."""
        if self._coordinates is None:
            return np.array(np.broadcast_to(whole.reshape(()), self.shape))
        return np.asarray(whole[self._coordinates])


def _for_torch(index: Any) -> Any:
    """``index`` with JAX arrays as NumPy ones (torch reads NumPy arrays, not JAX's)."""
    if isinstance(index, tuple):
        return tuple(_for_torch(item) for item in index)
    if hasattr(index, "__jax_array__") or type(index).__module__.startswith("jax"):
        return np.asarray(index)
    return index
