#!/usr/bin/env bash
# Build the pinned venv in $1 with the Python $2, once per lock: the stamp's
# name carries the lock's hash ($3), so a changed lock rebuilds and an
# unchanged one is not touched, whatever the files' times (a fresh clone's
# are all new).
set -euo pipefail
dir=$1 py=$2 hash=$3
[ -f "$dir/.installed-$hash" ] && exit 0
test -x "$dir/bin/python" || "$py" -m venv "$dir"
# torch first, the CPU build, so nothing can pull the CUDA build in its place.
# PyPI has no +cpu wheel: a local one (pip's find-links, as on our machines)
# is used without touching any index (its dependencies come with the lock);
# otherwise PyTorch's CPU index.
TORCH=torch==2.13.0+cpu
TORCH_INDEX=${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
"$dir/bin/pip" install -q --upgrade pip
if ! "$dir/bin/pip" install -q --no-index --no-deps "$TORCH" 2>/dev/null; then
    echo "venv: $TORCH from $TORCH_INDEX" >&2
    "$dir/bin/pip" install -q "$TORCH" --index-url "$TORCH_INDEX"
fi
"$dir/bin/pip" install -q -r requirements.lock
"$dir/bin/pip" download -q --no-deps --require-hashes -r tests/reference/requirements.txt -d "$dir/reference"
rm -f "$dir"/.installed*
touch "$dir/.installed-$hash"
