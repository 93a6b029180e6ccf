"""``load_file`` / ``safe_open`` / ``save_file`` / ``load``: placement, zero copy, dtypes, slices.

Comparisons against safetensors and torch as oracles live in ``tests/parity``; corrupted
files in ``test_io_bad_input.py``; the progress bar in ``test_io_progress.py``.
"""

from __future__ import annotations

import collections
import gc
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import safetensors.flax
import safetensors.numpy
import safetensors.torch
import torch
from hypothesis import given, settings
from hypothesis.extra import numpy as hnp

import torch2jax_device as tj
from tests.support.checkpoints import nanogpt_checkpoint
from tests.support.deadlines import deadline
from torch2jax_device import (
    CheckpointError,
    InvalidIndexError,
    load,
    load_file,
    safe_open,
    save_file,
)
from torch2jax_device._src import dtypes as _dtypes
from torch2jax_device._src.checkpoints import reader
from torch2jax_device._src.checkpoints.reader import Reader
from torch2jax_device._src.interop import ALIGNMENT

CPU = tj.resolve("cpu")

# One tensor of every dtype safetensors and NumPy share, with awkward sizes so that
# tensors start at offsets that are not multiples of 64 in the file.
SAMPLES: dict[str, np.ndarray[Any, Any]] = {
    "bool": np.array([True, False, True]),
    "u8": np.arange(5, dtype=np.uint8),
    "i8": np.arange(-3, 4, dtype=np.int8),
    "f8_e5m2": np.linspace(-2, 2, 7).astype(ml_dtypes.float8_e5m2),
    "f8_e4m3": np.linspace(-2, 2, 9).astype(ml_dtypes.float8_e4m3fn),
    "f8_e8m0": np.array([0.25, 1, 8], dtype=ml_dtypes.float8_e8m0fnu),
    "f8_e4m3fnuz": np.linspace(-1, 1, 3).astype(ml_dtypes.float8_e4m3fnuz),
    "f8_e5m2fnuz": np.linspace(-1, 1, 5).astype(ml_dtypes.float8_e5m2fnuz),
    "i16": np.arange(-6, 6, dtype=np.int16).reshape(3, 4),
    "u16": np.arange(9, dtype=np.uint16),
    "f16": np.linspace(0, 1, 11, dtype=np.float16),
    "bf16": np.linspace(0, 1, 6).astype(ml_dtypes.bfloat16).reshape(2, 3),
    "i32": np.arange(-2, 3, dtype=np.int32),
    "u32": np.arange(7, dtype=np.uint32),
    "f32": np.array(3.5, dtype=np.float32),
    "c64": np.array([1 + 2j, -3j], dtype=np.complex64),
    "empty": np.zeros((0, 3), np.float32),
}


@pytest.fixture(autouse=True)
def _fresh_narrowing_warnings() -> None:
    _dtypes._warned.clear()


@pytest.fixture
def sample_file(tmp_path: Path) -> Path:
    path = tmp_path / "samples.safetensors"
    safetensors.numpy.save_file(SAMPLES, str(path), metadata={"format": "np"})
    return path


def _bytes_of(array: Any) -> bytes:
    return np.asarray(array).tobytes()


# --------------------------------------------------------------------------- load_file


def test_every_dtype_loads_bit_exact_committed_to_the_cpu(sample_file: Path) -> None:
    loaded = load_file(sample_file)
    assert list(loaded) == safetensors.safe_open(str(sample_file), "np").offset_keys()
    for name, expected in SAMPLES.items():
        array = loaded[name]
        assert array.dtype == expected.dtype, name
        assert array.shape == expected.shape, name
        assert _bytes_of(array) == expected.tobytes(), name
        assert array.committed and array.devices() == {CPU}, name


def mapping_of(path: Path) -> tuple[int, int] | None:
    """The address range where this process maps ``path``, or ``None`` (Linux ``/proc``)."""
    ranges = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5] == str(path.resolve()):
            low, high = (int(part, 16) for part in fields[0].split("-"))
            ranges.append((low, high))
    return (min(r[0] for r in ranges), max(r[1] for r in ranges)) if ranges else None


def inside(array: jax.Array, mapping: tuple[int, int] | None) -> bool:
    assert mapping is not None, "the file is not mapped"
    return mapping[0] <= array.unsafe_buffer_pointer() < mapping[1]


needs_proc = pytest.mark.skipif(
    not Path("/proc/self/maps").exists(), reason="reads the mappings from Linux /proc"
)


# The same dtypes, 64 elements each (sizes multiples of 64 bytes), and one odd tensor.
ALIGNED = {name: np.resize(value, (8, 8)) for name, value in SAMPLES.items() if value.size}
ALIGNED["odd"] = np.arange(5, dtype=np.int16)


@pytest.fixture
def aligned_file(tmp_path: Path) -> Path:
    """ALIGNED, written by tj.save_file: every tensor starts 64-byte aligned."""
    path = tmp_path / "aligned.safetensors"
    save_file(ALIGNED, path)
    return path


def _rewrite_in_place(path: Path, info: Any, fill: int) -> None:
    """Overwrite a tensor's bytes in the file itself (no new file), as an in-place writer."""
    descriptor = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(descriptor, bytes([fill]) * info.nbytes, info.start)
    finally:
        os.close(descriptor)


def load_mapped(path: Path) -> tuple[dict[str, jax.Array], tuple[int, int] | None, Any]:
    """``load_file(path)``, where the file is mapped, and where its tensors are in it."""
    loaded = load_file(path)
    with Reader(path) as reader:
        return loaded, mapping_of(path), reader.tensors


@needs_proc
def test_aligned_tensors_are_arrays_over_the_mapped_file(aligned_file: Path) -> None:
    loaded, mapping, infos = load_mapped(aligned_file)
    for name, expected in ALIGNED.items():
        assert infos[name].start % ALIGNMENT == 0, name
        assert inside(loaded[name], mapping), name
        assert loaded[name].unsafe_buffer_pointer() - mapping[0] == infos[name].start, name
        assert _bytes_of(loaded[name]) == expected.tobytes(), name
        assert loaded[name].committed and loaded[name].devices() == {CPU}, name
    # The alias shows: rewriting the file in place changes what the array reads.
    _rewrite_in_place(aligned_file, infos["u32"], 0)
    assert not np.asarray(loaded["u32"]).any()


@needs_proc
def test_unaligned_tensors_are_read_once_into_aligned_memory(sample_file: Path) -> None:
    """safetensors' own layout: most tensors start unaligned, and are copies."""
    loaded, mapping, infos = load_mapped(sample_file)
    unaligned = [n for n, i in infos.items() if i.nbytes and i.start % ALIGNMENT]
    assert len(unaligned) >= 10
    for name in unaligned:
        assert mapping is None or not inside(loaded[name], mapping), name
        assert loaded[name].unsafe_buffer_pointer() % ALIGNMENT == 0, name
    _rewrite_in_place(sample_file, infos["u32"], 0)
    assert np.asarray(loaded["u32"]).tolist() == SAMPLES["u32"].tolist()


@needs_proc
def test_backend_pread_reads_everything_into_memory_the_arrays_own(aligned_file: Path) -> None:
    loaded = load_file(aligned_file, backend="pread")
    assert mapping_of(aligned_file) is None
    with Reader(aligned_file) as reader:
        info = reader.tensors["u32"]
    _rewrite_in_place(aligned_file, info, 0)
    for name, expected in ALIGNED.items():
        assert _bytes_of(loaded[name]) == expected.tobytes(), name
    with pytest.raises(tj.InvalidDeviceError, match="backend='mmapp' is not one of"):
        load_file(aligned_file, backend="mmapp")


@needs_proc
def test_the_mapping_lives_as_long_as_the_arrays(aligned_file: Path) -> None:
    def load_one() -> jax.Array:
        return load_file(aligned_file)["u32"]  # the loader and its file are gone after this

    array = load_one()
    gc.collect()
    assert inside(array, mapping_of(aligned_file))
    aligned_file.unlink()  # the mapping keeps the data, as an open file would
    scribble = [np.full(2**16, 0xAB, np.uint8) for _ in range(64)]  # reuse freed memory
    assert np.asarray(array).tolist() == ALIGNED["u32"].tolist()
    del scribble, array
    gc.collect()
    assert mapping_of(aligned_file) is None


@needs_proc
def test_a_mapped_array_donated_to_a_jitted_step_leaves_the_file_alone(
    aligned_file: Path,
) -> None:
    """Training loops donate their parameters (``donate_argnums``) and update them with
    ``.at[...]``: the map is read-only, so the results are new buffers, never the file."""
    before = aligned_file.read_bytes()
    params = load_file(aligned_file)["u32"]
    assert inside(params, mapping_of(aligned_file))
    step = jax.jit(lambda p: p.at[0].set(7) + 1, donate_argnums=0)
    updated = step(params)
    expected = ALIGNED["u32"] + 1
    expected[0] = 8
    assert np.asarray(updated).tolist() == expected.tolist()
    mapping = mapping_of(aligned_file)  # None once the donated array let go of it
    assert mapping is None or not inside(updated, mapping)
    assert aligned_file.read_bytes() == before


def test_replacing_the_file_keeps_what_was_loaded(aligned_file: Path) -> None:
    loaded = load_file(aligned_file)
    save_file({name: np.zeros_like(value) for name, value in ALIGNED.items()}, aligned_file)
    for name, expected in ALIGNED.items():
        assert _bytes_of(loaded[name]) == expected.tobytes(), name
    assert not np.asarray(load_file(aligned_file)["u32"]).any()


@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_reads_in_small_chunks_and_buffers_give_the_same_arrays(
    sample_file: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    monkeypatch.setattr(reader, "CHUNK_BYTES", 8)
    loaded = load_file(sample_file, backend=backend, staging_bytes=3 * 64)
    for name, expected in SAMPLES.items():
        assert _bytes_of(loaded[name]) == expected.tobytes(), name
        assert loaded[name].committed and loaded[name].devices() == {CPU}, name


def test_only_explicit_host_to_device_transfers(sample_file: Path) -> None:
    """Never ``jnp.array``: an implicit transfer would fail under this guard."""
    with jax.transfer_guard("disallow"):
        loaded = load_file(sample_file)
        with pytest.raises(Exception, match="Disallowed host-to-device transfer"):
            safetensors.flax.load_file(str(sample_file))  # the guard can fail
    assert loaded["f32"].devices() == {CPU}


def test_device_none_means_the_cpu_and_a_missing_device_fails_before_reading(
    tmp_path: Path,
) -> None:
    path = tmp_path / "model.safetensors"
    save_file({"w": np.ones(2, np.float32)}, path)
    assert load_file(path, device=None)["w"].devices() == {CPU}
    not_even_a_file = tmp_path / "missing.safetensors"
    with pytest.raises(tj.DeviceUnavailableError, match="cuda"):
        load_file(not_even_a_file, device="cuda:0")


@pytest.mark.parametrize(
    "name, narrowed", [("i64", "int32"), ("u64", "uint32"), ("f64", "float32")]
)
def test_64_bit_tensors_narrow_with_a_warning_in_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, narrowed: str
) -> None:
    wide = {"i64": np.int64, "u64": np.uint64, "f64": np.float64}[name]
    values = np.arange(1000).astype(wide)
    path = tmp_path / "wide.safetensors"
    safetensors.numpy.save_file({name: values, "after": np.ones(3, np.float32)}, str(path))
    monkeypatch.setattr(reader, "CHUNK_BYTES", 64)  # narrowing crosses chunks
    with pytest.warns(tj.DtypeNarrowingWarning, match=f"{values.dtype} data becomes {narrowed}"):
        loaded = load_file(path)
    assert loaded[name].dtype == narrowed
    assert np.asarray(loaded[name]).tolist() == values.tolist()
    assert np.asarray(loaded["after"]).tolist() == [1.0, 1.0, 1.0]
    with jax.enable_x64(True):
        assert load_file(path)[name].dtype == values.dtype


def test_bf16_and_fp8_need_no_import_order_in_a_fresh_process(tmp_path: Path) -> None:
    path = tmp_path / "low.safetensors"
    safetensors.torch.save_file(
        {"a": torch.ones(2, dtype=torch.bfloat16), "b": torch.ones(2).to(torch.float8_e4m3fn)},
        str(path),
    )
    script = textwrap.dedent(f"""
        import sys
        from torch2jax_device import load_file
        loaded = load_file({str(path)!r})
        print(loaded["a"].dtype, loaded["b"].dtype, "torch" in sys.modules)
    """)
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=deadline(120),
        check=True,
    )
    assert result.stdout.split() == ["bfloat16", "float8_e4m3fn", "False"]


# --------------------------------------------------------------------------- safe_open


def test_safe_open_reads_header_tensors_and_slices(sample_file: Path) -> None:
    with safe_open(sample_file) as f:
        assert f.keys() == sorted(SAMPLES)
        assert f.metadata() == {"format": "np"}
        bf16 = f.get_slice("bf16")
        assert (bf16.get_shape(), bf16.get_dtype()) == ([2, 3], "BF16")
        assert _bytes_of(bf16[1:]) == SAMPLES["bf16"][1:].tobytes()
        tensor = f.get_tensor("i16")
        assert tensor.committed and tensor.devices() == {CPU}
        assert tensor.unsafe_buffer_pointer() % ALIGNMENT == 0
        assert np.asarray(tensor).tolist() == SAMPLES["i16"].tolist()


@needs_proc
def test_safe_open_maps_aligned_tensors_and_slices(aligned_file: Path) -> None:
    with safe_open(aligned_file) as f:
        whole = f.get_tensor("u32")
        rows = f.get_slice("i16")[4:]  # 4 rows of 16 bytes in: aligned
        window = f.get_slice("f16")[0, 3:]  # 6 bytes in: not aligned
        column = f.get_slice("i32")[:, 1]  # not contiguous
        mapping = mapping_of(aligned_file)
    assert inside(whole, mapping) and inside(rows, mapping)
    assert not inside(window, mapping) and not inside(column, mapping)
    assert np.asarray(rows).tolist() == ALIGNED["i16"][4:].tolist()
    assert np.asarray(window).tolist() == ALIGNED["f16"][0, 3:].tolist()
    assert np.asarray(column).tolist() == ALIGNED["i32"][:, 1].tolist()
    assert np.asarray(whole).tolist() == ALIGNED["u32"].tolist()
    with safe_open(aligned_file, backend="pread") as f:
        assert not inside(f.get_tensor("u32"), mapping_of(aligned_file))


@pytest.mark.parametrize("framework", ["flax", "jax", "numpy", "np", "pt", "torch", "tf", "mlx"])
def test_safe_open_takes_safetensors_framework_argument_and_returns_jax(
    sample_file: Path, framework: str
) -> None:
    for opened in (safe_open(sample_file, framework), safe_open(sample_file, framework=framework)):
        with opened as f:
            tensor = f.get_tensor("i16")
        assert isinstance(tensor, jax.Array) and tensor.devices() == {CPU}
        assert np.asarray(tensor).tolist() == SAMPLES["i16"].tolist()


@pytest.mark.parametrize("device", ["cpu:0", "cuda", "gpu"])
def test_safe_open_explains_a_device_in_the_framework_slot(sample_file: Path, device: str) -> None:
    with pytest.raises(
        tj.InvalidDeviceError,
        match=f"the second argument is safetensors' framework.*device='{device}'",
    ):
        safe_open(sample_file, device)


def test_safe_open_without_metadata_and_after_close(tmp_path: Path) -> None:
    path = tmp_path / "plain.safetensors"
    safetensors.numpy.save_file({"w": np.ones(3, np.float32)}, str(path))
    f = safe_open(path)
    assert f.metadata() is None
    with pytest.raises(CheckpointError, match=r"has no tensor 'nope'; it has 1: 'w'"):
        f.get_tensor("nope")
    f.close()
    with pytest.raises(CheckpointError, match="was closed"):
        f.get_tensor("w")


BLOCK = np.arange(4 * 5 * 6, dtype=np.int32).reshape(4, 5, 6)


@pytest.fixture(scope="module")
def block_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("block") / "block.safetensors"
    safetensors.numpy.save_file({"block": BLOCK}, str(path))
    return path


@settings(max_examples=300, deadline=None)
@given(index=hnp.basic_indices(BLOCK.shape, allow_newaxis=True, allow_ellipsis=True))
def test_get_slice_matches_numpy_for_every_basic_index(block_file: Path, index: Any) -> None:
    with safe_open(block_file) as f:
        window = f.get_slice("block")[index]
    assert window.devices() == {CPU}
    np.testing.assert_array_equal(np.asarray(window), BLOCK[index])


@pytest.mark.parametrize("index", [(4,), (0, 5), (slice(None), slice(None), -7), (0, 0, 0, 0)])
def test_get_slice_out_of_range_raises_index_error_like_numpy(block_file: Path, index: Any) -> None:
    with pytest.raises(IndexError):
        BLOCK[index]
    with safe_open(block_file) as f, pytest.raises(IndexError):
        f.get_slice("block")[index]


@pytest.mark.parametrize("index", [[0, 1], np.array([1]), True, (slice(None), [0]), "a"])
def test_get_slice_refuses_advanced_indices(block_file: Path, index: Any) -> None:
    with safe_open(block_file) as f, pytest.raises(InvalidIndexError, match="takes ints, slices"):
        f.get_slice("block")[index]


def _bytes_read() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux /proc/self/io")
def test_get_slice_reads_only_the_bytes_it_selects(tmp_path: Path) -> None:
    path = tmp_path / "big.safetensors"
    rows = np.arange(1024 * 16384, dtype=np.float32).reshape(1024, 16384)  # 64 MiB
    safetensors.numpy.save_file({"rows": rows}, str(path))
    with safe_open(path) as f:
        view = f.get_slice("rows")
        view[0:1]  # warm up JAX
        cases = [
            ((slice(100, 116),), 16 * rows[0].nbytes),  # a window: one read
            ((slice(None), 3), rows.shape[0] * 4),  # a column: one read per row
            ((slice(None, None, 256), slice(0, 8)), 4 * 8 * 4),  # sparse rows
        ]
        for index, needed in cases:
            before = _bytes_read()
            window = view[index]
            read = _bytes_read() - before
            np.testing.assert_array_equal(np.asarray(window), rows[index])
            assert needed <= read <= needed + 4096, (index, read)


# --------------------------------------------------------------------------- save_file


def test_save_file_takes_jax_numpy_and_torch_values(tmp_path: Path) -> None:
    path = tmp_path / "mixed.safetensors"
    save_file(
        {
            "jax": jnp.arange(3, dtype=jnp.bfloat16),
            "numpy": np.arange(4, dtype=">i4"),  # big-endian: stored little-endian
            "torch": torch.arange(2.0, requires_grad=True),
            "fp8": torch.ones(2).to(torch.float8_e5m2),
            "scalar": np.float16(2.5),
        },
        path,
        metadata={"step": "10"},
    )
    back = safetensors.torch.load_file(str(path))
    assert back["jax"].dtype == torch.bfloat16 and back["jax"].tolist() == [0, 1, 2]
    assert back["numpy"].dtype == torch.int32 and back["numpy"].tolist() == [0, 1, 2, 3]
    assert back["torch"].tolist() == [0.0, 1.0]
    assert back["fp8"].dtype == torch.float8_e5m2
    assert back["scalar"].shape == () and back["scalar"].item() == 2.5
    with safe_open(path) as f:
        assert f.metadata() == {"step": "10"}


def test_save_file_replaces_atomically_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    save_file({"w": np.zeros(2, np.float32)}, path)
    save_file({"w": np.ones(2, np.float32)}, path)
    assert np.asarray(load_file(path)["w"]).tolist() == [1.0, 1.0]
    assert os.listdir(tmp_path) == ["model.safetensors"]


def test_a_write_that_fails_midway_keeps_the_old_file(tmp_path: Path) -> None:
    """The file-size limit makes the write fail with EFBIG partway through the data."""
    path = tmp_path / "model.safetensors"
    save_file({"w": np.zeros(4, np.float32)}, path)
    original = path.read_bytes()
    script = textwrap.dedent(f"""
        import resource, signal
        import numpy as np
        from torch2jax_device import save_file
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        try:
            save_file({{"w": np.ones(1 << 20, np.float32)}}, {str(path)!r})
        except OSError as error:
            print("failed:", error.errno)
    """)
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=deadline(120),
        check=True,
    )
    assert result.stdout.startswith("failed: 27"), result.stdout + result.stderr  # EFBIG
    assert path.read_bytes() == original
    assert os.listdir(tmp_path) == ["model.safetensors"]


@pytest.mark.parametrize(
    "tensors, metadata, error, match",
    [
        ([np.ones(2)], None, tj.ConversionError, "mapping of names to arrays, not list"),
        ({"w": [1.0, 2.0]}, None, tj.ConversionError, "tensor 'w' is a list"),
        ({1: np.ones(2)}, None, tj.ArgumentTypeError, "names must be strings"),
        ({"__metadata__": np.ones(2)}, None, tj.ConversionError, "other than '__metadata__'"),
        ({"w": np.ones(2)}, {"step": 10}, tj.ArgumentTypeError, "metadata must map str to str"),
        ({"w": np.array(["a"])}, None, tj.DTypeError, "tensor 'w' has dtype <U1"),
        ({"w": np.ones(2, ml_dtypes.int4)}, None, tj.DTypeError, "dtype int4, which"),
        (
            {"w": torch.ones(2, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)},
            None,
            tj.DTypeError,
            "tensor 'w' has dtype torch.float4_e2m1fn_x2, which save_file cannot write",
        ),
        ({"w": torch.ones(2).to_sparse()}, None, tj.ConversionError, "torch.sparse_coo"),
        ({"w": torch.ones(2, device="meta")}, None, tj.ConversionError, "on meta"),
    ],
)
def test_save_file_rejects_what_it_cannot_write(
    tmp_path: Path, tensors: Any, metadata: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        save_file(tensors, tmp_path / "out.safetensors", metadata)
    assert os.listdir(tmp_path) == []


def test_save_file_rejects_tracers_and_deleted_arrays(tmp_path: Path) -> None:
    path = tmp_path / "out.safetensors"
    with pytest.raises(tj.ConversionError, match="tensor 'x' is a tracer"):
        jax.jit(lambda x: save_file({"x": x}, path))(jnp.ones(2))
    deleted = jnp.ones(2)
    deleted.delete()
    with pytest.raises(tj.ConversionError, match="tensor 'x' is a deleted array"):
        save_file({"x": deleted}, path)


# --------------------------------------------------------------------------- load


def test_load_keeps_a_nanogpt_checkpoint_and_converts_its_tensors(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    saved = nanogpt_checkpoint()
    torch.save(saved, path)
    loaded = load(path)
    assert type(loaded["model"]) is collections.OrderedDict
    assert list(loaded["model"]) == list(saved["model"])
    assert loaded["iter_num"] == 250 and loaded["model_args"] == saved["model_args"]
    assert loaded["config"] == saved["config"]
    assert loaded["optimizer"]["param_groups"][0]["lr"] == 1e-3
    for name, tensor in saved["model"].items():
        array = loaded["model"][name]
        assert array.committed and array.devices() == {CPU}
        np.testing.assert_array_equal(np.asarray(array), tensor.numpy())
    state = loaded["optimizer"]["state"][0]
    np.testing.assert_array_equal(
        np.asarray(state["exp_avg"]), saved["optimizer"]["state"][0]["exp_avg"].numpy()
    )
    assert float(loaded["best_val_loss"]) == 2.75


def test_load_shares_torch_memory_and_keeps_shared_tensors_shared(tmp_path: Path) -> None:
    weight = torch.arange(64.0).reshape(4, 16)  # rows of 64 bytes: views stay aligned
    path = tmp_path / "tied.pt"
    torch.save({"embed": weight, "head": weight, "row": weight[1]}, path)
    loaded = load(path)
    assert loaded["head"] is loaded["embed"]
    row_offset = loaded["row"].unsafe_buffer_pointer() - loaded["embed"].unsafe_buffer_pointer()
    assert row_offset == 16 * 4  # the view aliases the same storage: nothing was copied
    assert np.asarray(loaded["row"]).tolist() == weight[1].tolist()


def test_load_reads_legacy_torch_files_and_safetensors_under_any_name(tmp_path: Path) -> None:
    legacy = tmp_path / "legacy.pt"
    torch.save({"w": torch.ones(2)}, legacy, _use_new_zipfile_serialization=False)
    assert np.asarray(load(legacy)["w"]).tolist() == [1.0, 1.0]
    disguised = tmp_path / "model.bin"
    safetensors.numpy.save_file({"w": np.full(2, 3, np.float32)}, str(disguised))
    assert np.asarray(load(disguised)["w"]).tolist() == [3.0, 3.0]


def test_map_location_for_safetensors(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    save_file({"w": np.ones(2, np.float32)}, path)
    for where in ("cpu", tj.device("cpu"), torch.device("cpu"), CPU, {"cpu": "cpu"}, {}):
        assert load(path, map_location=where)["w"].devices() == {CPU}, where
    with pytest.raises(tj.DeviceUnavailableError, match="cuda"):
        load(path, map_location={"cpu": "cuda:0"})
    with pytest.raises(tj.DeviceTypeError, match="a safetensors file has none"):
        load(path, map_location=lambda storage, location: storage)


def test_a_tj_device_map_location_is_a_device_not_a_callable(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    torch.save({"w": torch.ones(2)}, path)
    assert callable(tj.device("cpu"))  # its decorator form
    assert load(path, map_location=tj.device("cpu"))["w"].devices() == {CPU}


def test_map_location_of_the_wrong_type(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    torch.save({"w": torch.ones(2)}, path)
    with pytest.raises(tj.DeviceTypeError, match="not float"):
        load(path, map_location=1.5)


def test_a_failing_map_location_callable_propagates_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    torch.save({"w": torch.ones(2)}, path)

    def refuse(storage: Any, location: str) -> Any:
        raise KeyError(f"no rule for {location}")

    with pytest.raises(KeyError, match="no rule for cpu"):
        load(path, map_location=refuse)


def test_load_int64_tensors_narrow_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "ids.pt"
    torch.save({"ids": torch.arange(3)}, path)
    with pytest.warns(tj.DtypeNarrowingWarning, match="int64 data becomes int32"):
        loaded = load(path)
    assert loaded["ids"].dtype == jnp.int32


def test_load_without_torch_names_what_to_install(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    torch.save({"w": torch.ones(2)}, path)
    script = textwrap.dedent(f"""
        import sys
        sys.modules["torch"] = None  # as if torch were not installed
        from torch2jax_device import CheckpointError, load
        try:
            load({str(path)!r})
        except CheckpointError as error:
            print(error)
    """)
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=deadline(120),
        check=True,
    )
    assert "reading one needs torch, which is not installed" in result.stdout
    assert "pip install torch" in result.stdout


def test_windows_past_two_to_the_31_elements(tmp_path: Path) -> None:
    """A 2 GiB+ token tensor in a sparse file: windows far in, without reading the rest."""
    count = 2**31 + 4096
    header = json.dumps({"t": {"dtype": "U8", "shape": [count], "data_offsets": [0, count]}})
    raw = header.encode() + b" " * (-(8 + len(header)) % ALIGNMENT)
    path = tmp_path / "sparse.safetensors"
    with open(path, "wb") as file:
        file.write(len(raw).to_bytes(8, "little") + raw)
        file.truncate(8 + len(raw) + count)  # holes: no disk, no RAM
        file.seek(8 + len(raw) + 2**31 + 10)
        file.write(bytes(range(1, 11)))
    expected = list(range(1, 11))
    with safe_open(path) as f:
        assert np.asarray(f.get_slice("t")[2**31 + 10 : 2**31 + 20]).tolist() == expected
    with safe_open(path, backend="pread") as f:
        assert np.asarray(f.get_slice("t")[2**31 + 10 : 2**31 + 20]).tolist() == expected
    tokens = load_file(path)["t"]
    assert np.asarray(tokens)[2**31 + 10 : 2**31 + 20].tolist() == expected
