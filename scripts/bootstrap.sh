#!/usr/bin/env bash
# Create .venv inside the repository and install the package with its test and dev
# tools. CPU installs take torch from constraints-cpu.txt, so no CUDA wheels are
# downloaded. Re-running is cheap: nothing is reinstalled unless pyproject.toml or
# the constraints changed.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
venv=.venv
stamp=$venv/.torch2jax-device-installed
want=$(cat pyproject.toml constraints-cpu.txt | sha256sum | cut -d' ' -f1)

if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet -c constraints-cpu.txt -e ".[dev]"
  echo "$want" > "$stamp"
fi
