#!/usr/bin/env bash
# Install what the demo needs into .venv, then run examples/quickstart.py.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/python examples/quickstart.py "$@"
