#!/usr/bin/env bash
# Install what the demo needs into .venv (the package and flax: no torch, no dev
# tools), then run examples/quickstart.py.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --demo
exec .venv/bin/python examples/quickstart.py "$@"
