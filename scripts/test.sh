#!/usr/bin/env bash
# The whole test suite: install into .venv, lint, type-check, build the docs site in
# strict mode and check every link in it, then run the tests twice: once in a normal
# process and once with 4 simulated CPU devices (JAX reads the device count only when
# it starts, so multi-device tests need their own process).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh

# Frameworks that must import: a broken torch install fails the run instead of
# silently skipping the side-by-side tests.
export TORCH2JAX_DEVICE_TEST_REQUIRE=${TORCH2JAX_DEVICE_TEST_REQUIRE:-torch,flax,equinox,hypothesis}

.venv/bin/python -m ruff check .
.venv/bin/python -m ruff format --check .
.venv/bin/python -m mypy
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
NO_MKDOCS_2_WARNING=1 .venv/bin/python -m mkdocs build --strict --site-dir "$site"
.venv/bin/python scripts/check_site.py "$site"
.venv/bin/python -m pytest --doctest-modules torch2jax_device tests --ignore=tests/multidevice "$@"
JAX_NUM_CPU_DEVICES=4 .venv/bin/python -m pytest tests/multidevice "$@"
