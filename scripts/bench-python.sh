#!/usr/bin/env bash
# Print the path of a Python with the `implicit` library installed (crates/penchant-bench/python/
# requirements.txt), the reference of `penchant-bench als`, making the virtual environment if
# needed (cached under ~/.cache/penchant; remade when the requirements change).
set -euo pipefail
cd "$(dirname "$0")/.."

requirements=crates/penchant-bench/python/requirements.txt
cache="${XDG_CACHE_HOME:-$HOME/.cache}/penchant"
venv="$cache/bench-venv"
stamp="$venv/requirements.txt"
if [[ ! -x "$venv/bin/python" ]] || ! cmp -s "$requirements" "$stamp"; then
  echo "bench-python: making $venv" >&2
  rm -rf "$venv"
  mkdir -p "$cache"
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements" >&2
  cp "$requirements" "$stamp"
fi
echo "$venv/bin/python"
