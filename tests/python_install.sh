#!/usr/bin/env bash
# `cmake --install --component python` into a plain folder (used through PYTHONPATH) and into a
# --system-site-packages virtual environment, then `import xgrad` from each, away from the build folder.
# Usage: python_install.sh BUILD_DIR PYTHON
set -euo pipefail
build=$1
python=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
check='import numpy as np, xgrad
t = xgrad.Tape(); x = t.input(np.arange(3.0)); (x * x).sum().backward()
assert (x.grad == 2 * np.arange(3.0)).all() and xgrad.__file__.startswith(PREFIX), xgrad.__file__
print("imported", xgrad.__file__)'

cmake --install "$build" --component python --prefix "$work/folder" >/dev/null
site=$(echo "$work"/folder/lib/python3*/site-packages)
(cd "$work" && env PYTHONPATH="$site" "$python" -c "PREFIX = '$work/folder'; $check")
# The course's stubs are installed beside the package: `python3 -m xgrad.course new` copies them.
(cd "$work" && env PYTHONPATH="$site" "$python" -m xgrad.course new "$work/class" >/dev/null)
test -f "$work/class/a1_functions.py" && test -f "$work/class/cpp/a3_mha_backward.cpp"

"$python" -m venv --without-pip --system-site-packages "$work/venv"
cmake --install "$build" --component python --prefix "$work/venv" >/dev/null
(cd "$work" && env -u PYTHONPATH "$work/venv/bin/python" -c "PREFIX = '$work/venv'; $check")
