"""Catalog rows, section "Streams and timing": CUDA events, streams and profiler ranges."""

from __future__ import annotations

from ..idiom import Idiom

SECTION = "Streams and timing"

ROWS: tuple[Idiom, ...] = (
    Idiom(
        id="cuda-event-timing",
        section=SECTION,
        title="Time GPU work",
        torch=(
            "start = torch.cuda.Event(enable_timing=True)\n"
            "end = torch.cuda.Event(enable_timing=True)\n"
            "start.record()\n"
            "y = f(x)\n"
            "end.record()\n"
            "torch.cuda.synchronize()\n"
            "ms = start.elapsed_time(end)"
        ),
        jax=(
            "start = time.perf_counter()\n"
            "y = jax.block_until_ready(f(x))\n"
            "ms = (time.perf_counter() - start) * 1000"
        ),
        tj=(
            "start = time.perf_counter()\n"
            "y = jax.block_until_ready(f(x))\n"
            "ms = (time.perf_counter() - start) * 1000"
        ),
        notes=(
            "JAX dispatches asynchronously, like CUDA: wait for the result before reading "
            "the clock. Run the jitted function once before timing it (the first call "
            "compiles)."
        ),
        runs=False,
        torch_api=("torch.cuda.Event", "torch.Event", "torch.mps.Event"),
        rewrite="advice",
    ),
    Idiom(
        id="cuda-stream",
        section=SECTION,
        title="Run work on a side stream",
        torch="stream = torch.cuda.Stream()\nwith torch.cuda.stream(stream):\n    y = f(x)",
        jax="y = f(x)  # XLA schedules its own streams; transfers overlap compute",
        tj="y = f(x)  # XLA schedules its own streams; transfers overlap compute",
        notes=(
            "JAX exposes no streams. Transfers (`tj.to_device`, `tj.DeviceLoader`) are "
            "asynchronous already; `record_stream` and `wait_stream` have nothing to do."
        ),
        runs=False,
        torch_api=(
            "torch.cuda.Stream",
            "torch.cuda.stream",
            "torch.cuda.current_stream",
            "torch.cuda.default_stream",
            "torch.cuda.set_stream",
            "torch.Stream",
            "Tensor.record_stream",
        ),
        rewrite="advice",
    ),
    Idiom(
        id="profiler",
        section=SECTION,
        title="Profile GPU work",
        torch=(
            "with torch.profiler.profile(activities=[ProfilerActivity.CUDA]) as prof:\n    y = f(x)"
        ),
        jax='with jax.profiler.trace("/tmp/trace"):\n    y = jax.block_until_ready(f(x))',
        tj='with jax.profiler.trace("/tmp/trace"):\n    y = jax.block_until_ready(f(x))',
        notes=(
            "The trace opens in TensorBoard or Perfetto. Named ranges "
            "(`torch.cuda.nvtx.range_push`, `record_function`) are "
            "`jax.profiler.TraceAnnotation(name)`. A capture range "
            "(`torch.cuda.cudart().cudaProfilerStart()` / `Stop()`, "
            "`torch.cuda.profiler.start()`) is `jax.profiler.start_trace(dir)` / "
            "`stop_trace()`."
            " The profiler's report (`prof.key_averages().table(...)`, "
            "`prof.export_chrome_trace(path)`, `export_stacks`) is the trace's view in "
            "TensorBoard or Perfetto: `jax.profiler.start_trace(dir, "
            "create_perfetto_trace=True)` writes a Perfetto trace."
        ),
        runs=False,
        torch_api=(
            "torch.profiler.profile",
            "torch.profiler.record_function",
            "torch.autograd.profiler.profile",
            "torch.autograd.profiler.record_function",
            "torch.cuda.nvtx.range_push",
            "torch.cuda.nvtx.range_pop",
            "torch.cuda.nvtx.range",
            "torch.cuda.profiler.start",
            "torch.cuda.profiler.stop",
            "torch.cuda.cudart",  # cudart().cudaProfilerStart(): nsys's capture range
            "torch.profiler.*",
            "torch.autograd.profiler.*",
            "torch.cuda.nvtx.*",
            "torch.cuda.profiler.*",
        ),
        rewrite="advice",
    ),
)
