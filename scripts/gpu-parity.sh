#!/usr/bin/env bash
# Run the side-by-side suite on a GPU machine where torch (CUDA build) and a CUDA
# build of JAX are already installed. The GPU tests fail here instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
export TORCH2JAX_DEVICE_TEST_REQUIRE=torch,cuda
PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} "$python" -m pytest -p no:cacheprovider tests/parity tests/gpu "$@"
