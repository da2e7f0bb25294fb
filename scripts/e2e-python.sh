#!/usr/bin/env bash
# Print the path of a Python with the official Algolia client installed (e2e/python/
# requirements.txt), making the virtual environment if needed (cached under ~/.cache/penchant;
# remade when the requirements change).
set -euo pipefail
cd "$(dirname "$0")/.."

cache="${XDG_CACHE_HOME:-$HOME/.cache}/penchant"
venv="$cache/e2e-venv"
stamp="$venv/requirements.txt"
if [[ ! -x "$venv/bin/python" ]] || ! cmp -s e2e/python/requirements.txt "$stamp"; then
  echo "e2e-python: making $venv" >&2
  rm -rf "$venv"
  mkdir -p "$cache"
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q --disable-pip-version-check -r e2e/python/requirements.txt >&2
  cp e2e/python/requirements.txt "$stamp"
fi
echo "$venv/bin/python"
