#!/usr/bin/env bash
# The binaries `make test` runs for real: promtool and the Prometheus server (Debian package
# `prometheus`), Alertmanager and amtool (Debian package `prometheus-alertmanager`). Installs the
# missing ones with apt-get where this machine can (as root, or through passwordless sudo as on
# GitHub's hosted runners); otherwise says in one line what to install and fails, so a test that
# needs them is never skipped.
set -euo pipefail
declare -A package_of=(
  [promtool]=prometheus
  [prometheus]=prometheus
  [prometheus-alertmanager]=prometheus-alertmanager
  [amtool]=prometheus-alertmanager
)
missing=()
for binary in "${!package_of[@]}"; do
  command -v "$binary" >/dev/null 2>&1 || missing+=("${package_of[$binary]}")
done
[ "${#missing[@]}" -eq 0 ] && exit 0
mapfile -t packages < <(printf '%s\n' "${missing[@]}" | sort -u)
how="apt-get install -y --no-install-recommends ${packages[*]}"
if ! command -v apt-get >/dev/null 2>&1; then
  echo "make test needs promtool, prometheus and Alertmanager on PATH (Debian/Ubuntu: $how); install them and retry" >&2
  exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "make test needs Debian packages ${packages[*]}: run 'sudo $how' and retry" >&2
  exit 1
fi
echo "installing Debian packages ${packages[*]} (the tests run promtool, Prometheus and Alertmanager for real)" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
