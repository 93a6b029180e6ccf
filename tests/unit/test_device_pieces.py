"""How ``device_pieces.pieces`` cuts an array: blocks that tile it, each element once.

The pinned route sends every piece over the bus, so a piece that overlapped the one
before it (the last block along an axis used to end at the axis's end, with the shape
of the others) moved bytes twice. Hypothesis draws shapes, item sizes and piece sizes;
the oracle is the array itself: counting, element by element, how many pieces cover it.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from torch2jax_device._src.device_pieces import piece_kinds, pieces

SHAPES = hnp.array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=12)


@settings(max_examples=300, deadline=None)
@given(shape=SHAPES, itemsize=st.sampled_from([1, 2, 4, 8]), per_piece=st.integers(1, 700))
def test_the_pieces_tile_the_array_each_element_once(
    shape: tuple[int, ...], itemsize: int, per_piece: int
) -> None:
    covered = np.zeros(shape, np.int64)
    cut = list(pieces(shape, itemsize, per_piece))
    for piece in cut:
        size = math.prod(piece.shape)
        assert size <= per_piece
        assert piece.nbytes == size * itemsize  # what travels is the piece's own bytes
        bounds = zip(piece.starts, piece.shape, strict=True)
        region = tuple(slice(start, start + n) for start, n in bounds)
        covered[region] += 1
        flat = np.arange(covered.size).reshape(shape)[region].reshape(-1)
        assert flat.tolist() == list(range(piece.first, piece.first + size))  # contiguous
    assert covered.min(initial=1) == covered.max(initial=1) == 1
    assert sum(piece.nbytes for piece in cut) == math.prod(shape) * itemsize
    assert [piece.last for piece in cut] == [False] * (len(cut) - 1) + [True]
    # One update compiles per piece shape: the full blocks' and, where the axis does not
    # divide, the shorter last block's.
    kinds = piece_kinds(shape, itemsize, per_piece)
    assert len(kinds) <= 2 and {piece.shape for piece in cut} == {k.shape for k in kinds}
