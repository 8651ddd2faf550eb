#!/usr/bin/env bash
# On the GPU machine: join the chunks copied to /tmp/w (wheels.part.NN), install them into /tmp/site
# without an index, once per machine. Then: export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
set -euo pipefail
[ -f /tmp/site/.ok ] && exit 0
mkdir -p /tmp/w/wheels && cat /tmp/w/wheels.part.* | tar x -C /tmp/w/wheels
list="$(cd "$(dirname "$0")" && pwd)/wheels.txt"
if [ -f "$list" ]; then  # every wheel the pinned list names (less DROP, as packed), with its hash, and nothing else
  want=$(grep -v '^#' "$list" | grep -Ev "${DROP:-^$}")
  (cd /tmp/w/wheels && echo "$want" | sed 's/ sha256:/ /' | awk '{print $2"  "$1}' | sha256sum -c --quiet)
  [ "$(ls /tmp/w/wheels | wc -l)" -eq "$(echo "$want" | wc -l)" ] || { echo "wheels differ from $list" >&2; exit 1; }
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/w/wheels/*.whl
touch /tmp/site/.ok
echo "installed $(ls /tmp/w/wheels | wc -l) wheels into /tmp/site"
