#!/usr/bin/env bash
# Create .venv inside the repository and install the package into it.
#
#   scripts/bootstrap.sh          the test suite and dev tools (torch, flax, ruff, mypy,
#                                 mkdocs, build, twine): what scripts/test.sh runs
#   scripts/bootstrap.sh --demo   only what examples/quickstart.py needs (the package
#                                 and flax): what scripts/demo.sh runs
#
# torch is PyTorch's CPU build: constraints-cpu.txt pins its "+cpu" version, which
# scripts/torch_cpu_source.py finds on PyTorch's CPU wheel index (or, where that is
# unreachable, pip's own configuration must provide it), so no CUDA wheel is ever
# downloaded. Re-running is cheap: nothing is reinstalled unless pyproject.toml or the
# constraints changed.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=dev
extras="[dev]"
if [ "${1:-}" = "--demo" ]; then
  profile=demo
  extras="[flax]"
fi

# The interpreter a new .venv is made from: $PYTHON if set; else the first Python 3.11+
# whose libpython is linked into the interpreter rather than loaded as a shared library
# (as Debian and Ubuntu build their python3, optimised with profile-guided and link-time
# optimisation); else python3. pyenv's default build loads a shared libpython built
# without those optimisations, and the test suite costs about a sixth more CPU under it
# (CONTRIBUTING.md, "Keeping the loop fast"). An existing .venv keeps its interpreter:
# remove .venv to change it.
static_python() {
  local candidate
  for candidate in $(type -ap python3 python3.11) /usr/bin/python3; do
    if "$candidate" -c 'import sys
sys.exit(sys.version_info < (3, 11) or "/libpython" in open("/proc/self/maps").read())' \
      2>/dev/null; then
      echo "$candidate"
      return
    fi
  done
  echo python3
}
venv=.venv
want=$(cat pyproject.toml constraints-cpu.txt | sha256sum | cut -d' ' -f1)
# The dev install holds everything the demo needs.
for installed in "$venv/.installed-$profile" "$venv/.installed-dev"; do
  if [ "$(cat "$installed" 2>/dev/null)" = "$want" ]; then
    exit 0
  fi
done

if [ ! -x "$venv/bin/python" ]; then
  "${PYTHON:-$(static_python)}" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
mapfile -t torch_source < <("$venv/bin/python" scripts/torch_cpu_source.py)
if ! "$venv/bin/python" -m pip install --quiet "${torch_source[@]}" -e ".$extras"; then
  echo "bootstrap: the install failed. If pip could not find torch==...+cpu" \
    "(constraints-cpu.txt): PyTorch's CPU wheel index is unreachable from here, so" \
    "point pip at a copy of that wheel (PIP_FIND_LINKS=/dir/with/the/wheel) and run" \
    "this again." >&2
  exit 1
fi
echo "$want" > "$venv/.installed-$profile"
