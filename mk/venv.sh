#!/usr/bin/env bash
# Build the pinned venv in $1 with the Python $2, once per lock: the stamp's
# name carries the lock's hash ($3), so a changed lock rebuilds and an
# unchanged one is not touched, whatever the files' times (a fresh clone's
# are all new).
set -euo pipefail
dir=$1 py=$2 hash=$3
[ -f "$dir/.installed-$hash" ] && exit 0
test -x "$dir/bin/python" || "$py" -m venv "$dir"
# torch first, pinned, so nothing can pull the CUDA build in its place.
"$dir/bin/pip" install -q --upgrade pip
"$dir/bin/pip" install -q torch==2.13.0
"$dir/bin/pip" install -q -r requirements.lock
"$dir/bin/pip" download -q --no-deps --require-hashes -r tests/reference/requirements.txt -d "$dir/reference"
rm -f "$dir"/.installed*
touch "$dir/.installed-$hash"
