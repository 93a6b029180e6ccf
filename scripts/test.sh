#!/usr/bin/env bash
# The test suite, in two tiers (CONTRIBUTING.md):
#
#   scripts/test.sh [PYTEST ARGS]          everything, what CI runs: lint, type-check, the
#                                          docs site built in strict mode with every link
#                                          checked, the GPU check's CPU mode, and the tests
#   scripts/test.sh --fast [PYTEST ARGS]   the edit-test loop (under a minute): lint, then
#                                          the tests not marked slow (no test that starts a
#                                          process; tests/conftest.py says which are slow),
#                                          tests/unit and the rest in two processes
#
# The full run starts independent groups side by side and prints each group's output
# when it ends, the in-process tests last, so the closing line is their pytest summary:
#   checks       ruff, ruff format, mypy, mkdocs build --strict, scripts/check_site.py and
#                the import's CPU budget (benchmarks/bench_import.py --check)
#   gpu-check    scripts/gpu-check.sh --cpu (bench_gpu.py's CPU mode, so it cannot rot)
#   multidevice  tests/multidevice with 4 simulated CPU devices (JAX reads the device
#                count only when it starts, so these tests need their own process)
#   proxy        tests/unit, tests/parity and tests/gpu (not slow) with JAX's default
#                device moved off the CPU torch uses, as on a GPU machine
#                (TORCH2JAX_DEVICE_TEST_PROXY=1, tests/support/gpu_proxy.py; its own process)
#   slow-*       the tests that start processes, in six groups: jobs (launchers and
#                multi-process runs), examples (real training scripts), cli (the
#                commands), project (packaging, imports, docs), unit and the rest
#   in-process   every other test and the package's doctests
# The groups together are the whole suite; the script fails if any group fails. Each
# pytest process keeps its own cache (.pytest_cache/<group>), so --lf works per group.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh

# Frameworks that must import: a broken torch install fails the run instead of
# silently skipping the side-by-side tests.
export TORCH2JAX_DEVICE_TEST_REQUIRE=${TORCH2JAX_DEVICE_TEST_REQUIRE:-torch,flax,equinox,hypothesis,accelerate}
# pytest keeps each test module with its assertions rewritten in __pycache__, but only
# where Python may write bytecode: with PYTHONDONTWRITEBYTECODE set (as on the project's
# machines) every pytest process rewrote every module again, about 6 s of CPU each.
unset PYTHONDONTWRITEBYTECODE
python=.venv/bin/python
in_process=(--doctest-modules torch2jax_device tests --ignore=tests/multidevice)
# Which of the tests' quick-compile XLA flags this jaxlib knows (tests/support/xla.py),
# asked once here rather than by each pytest process.
TORCH2JAX_DEVICE_TEST_UNKNOWN_XLA_FLAGS=$("$python" -c \
  'import os; from tests.support import xla; xla.known_flags(); print(os.environ[xla.UNKNOWN_ENV])')
export TORCH2JAX_DEVICE_TEST_UNKNOWN_XLA_FLAGS

logs=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$logs"' EXIT

if [ "${1:-}" = "--fast" ]; then
  shift
  "$python" -m ruff check .
  "$python" -m ruff format --check .
  # Two pytest processes, one per core: tests/unit beside the rest.
  "$python" -m pytest -m "not slow" -o cache_dir=.pytest_cache/unit tests/unit "$@" \
    >"$logs/unit.log" 2>&1 &
  pids+=($!)
  status=0
  "$python" -m pytest -m "not slow" "${in_process[@]}" --ignore=tests/unit "$@" || status=$?
  unit=0
  wait "${pids[0]}" || unit=$?
  pids=()
  echo "=============================== tests/unit (exit $unit) ==============================="
  cat "$logs/unit.log"
  [ "$status" -eq 5 ] && [ $# -gt 0 ] && status=0
  [ "$unit" -eq 5 ] && [ $# -gt 0 ] && unit=0
  if [ "$status" -ne 0 ] || [ "$unit" -ne 0 ]; then
    echo "test.sh --fast: failed (exit $status for the rest, $unit for tests/unit)"
    exit 1
  fi
  exit 0
fi

# What failed, with the deadlines hit (tests/support/deadlines.py marks them) apart from
# the other failures: a deadline is a hang or a machine too busy for it, and says how to
# re-run with more time.
summarize_failures() {
  local group hits others
  echo "test.sh: failed: $* (each group's output is above)"
  for group in "$@"; do
    hits=$(sed -n 's/^DEADLINE HIT: //p' "$logs/$group.log" | sort -u)
    # pytest's "FAILED <nodeid> - <message>": a node id may hold spaces (parameters).
    others=$(awk '/^(FAILED|ERROR) / { line = substr($0, index($0, " ") + 1)
        cut = index(line, " - "); print (cut ? substr(line, 1, cut - 1) : line) }' \
      "$logs/$group.log" | sort -u | grep -vxF -f <(printf '%s\n' "$hits") || true)
    echo "  $group:"
    if [ -n "$hits" ]; then
      echo "    deadlines hit (a hang, or a machine too busy: re-run with" \
        "TORCH2JAX_DEVICE_TEST_DEADLINE_SCALE=4 ./scripts/test.sh NODEID):"
      sed 's/^/      /' <<<"$hits"
    fi
    if [ -n "$others" ]; then
      echo "    failures:"
      sed 's/^/      /' <<<"$others"
    fi
    if [ -z "$hits$others" ]; then
      echo "    no test failed: the group's own command did (its output is above)"
    fi
  done
}

checks() {
  "$python" -m ruff check .
  "$python" -m ruff format --check .
  "$python" -m mypy
  NO_MKDOCS_2_WARNING=1 "$python" -m mkdocs build --strict --site-dir "$logs/site"
  "$python" scripts/check_site.py "$logs/site"
  # What the import adds to import jax, in CPU time (which load does not blur).
  "$python" benchmarks/bench_import.py --check 5
}

# The tests that start processes, in six groups: jobs (launchers and multi-process
# runs, mostly waiting on their processes' deadlines, so they overlap the others well),
# examples (real training scripts, the heaviest on the CPU), the commands, the project's
# own checks, tests/unit's, and the rest (tests/parity's). The groups share two cores
# evenly, so the largest ends last: no group may cost much more CPU than the others.
jobs=(tests/unit/test_distributed*.py tests/unit/test_checkpoints_agreement.py
  tests/parity/test_distributed*.py)
not_jobs=()
for file in "${jobs[@]}"; do not_jobs+=(--ignore="$file"); done

groups=(checks gpu-check multidevice proxy slow-jobs slow-examples slow-cli slow-project slow-unit
  slow-parity in-process)
checks >"$logs/checks.log" 2>&1 &
pids+=($!)
PYTHON=$python scripts/gpu-check.sh --cpu >"$logs/gpu-check.log" 2>&1 &
pids+=($!)
JAX_NUM_CPU_DEVICES=4 "$python" -m pytest -o cache_dir=.pytest_cache/multidevice \
  tests/multidevice "$@" >"$logs/multidevice.log" 2>&1 &
pids+=($!)
TORCH2JAX_DEVICE_TEST_PROXY=1 "$python" -m pytest -m "not slow" -o cache_dir=.pytest_cache/proxy \
  tests/unit tests/parity tests/gpu "$@" >"$logs/proxy.log" 2>&1 &
pids+=($!)
"$python" -m pytest -m slow -o cache_dir=.pytest_cache/slow-jobs "${jobs[@]}" "$@" \
  >"$logs/slow-jobs.log" 2>&1 &
pids+=($!)
"$python" -m pytest -m slow -o cache_dir=.pytest_cache/slow-examples tests/examples "$@" \
  >"$logs/slow-examples.log" 2>&1 &
pids+=($!)
"$python" -m pytest -m slow -o cache_dir=.pytest_cache/slow-cli tests/cli "$@" \
  >"$logs/slow-cli.log" 2>&1 &
pids+=($!)
"$python" -m pytest -m slow -o cache_dir=.pytest_cache/slow-project tests/project "$@" \
  >"$logs/slow-project.log" 2>&1 &
pids+=($!)
"$python" -m pytest -m slow -o cache_dir=.pytest_cache/slow-unit tests/unit "${not_jobs[@]}" "$@" \
  >"$logs/slow-unit.log" 2>&1 &
pids+=($!)
"$python" -m pytest -m slow -o cache_dir=.pytest_cache/slow-parity tests --ignore=tests/unit \
  --ignore=tests/multidevice --ignore=tests/examples --ignore=tests/cli --ignore=tests/project \
  "${not_jobs[@]}" "$@" >"$logs/slow-parity.log" 2>&1 &
pids+=($!)
"$python" -m pytest -m "not slow" "${in_process[@]}" "$@" >"$logs/in-process.log" 2>&1 &
pids+=($!)

failed=()
for i in "${!groups[@]}"; do
  status=0
  wait "${pids[$i]}" || status=$?
  # pytest's 5: the arguments given select no test of this group, which is not a failure.
  [ "$status" -eq 5 ] && [ $# -gt 0 ] && status=0
  echo "=============================== ${groups[$i]} (exit $status) ==============================="
  cat "$logs/${groups[$i]}.log"
  [ "$status" -eq 0 ] || failed+=("${groups[$i]}")
done
pids=()
if [ "${#failed[@]}" -gt 0 ]; then
  summarize_failures "${failed[@]}"
  exit 1
fi
