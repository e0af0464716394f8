#!/usr/bin/env bash
# Puts a binary of Prometheus's, promtool (the rule checker) or prometheus
# (the server the monitoring end-to-end spec runs as a process), at OUT
# unless it is already there: a link to the one on PATH, or else the
# binary taken out of Debian's prometheus package with apt-get download and
# dpkg-deb. The package is not installed, so no Prometheus server is set up
# as a service or started. Refreshing the package lists (only when apt-get
# cannot find the package) needs root. Exits 3 with one line where it
# cannot (no apt-get).
# Usage: hack/prometheus-bin.sh OUT, where OUT ends in promtool or prometheus.
set -euo pipefail
out=$1
name=$(basename "$out")
case "$name" in
  promtool|prometheus) ;;
  *) echo "usage: $0 OUT, where OUT ends in promtool or prometheus" >&2; exit 2 ;;
esac
if [ -x "$out" ]; then
  exit 0
fi
mkdir -p "$(dirname "$out")"
if command -v "$name" >/dev/null; then
  ln -sf "$(command -v "$name")" "$out"
  exit 0
fi
if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
  echo "promtool is missing, and taking it from Debian's prometheus package needs apt-get and dpkg-deb; install $name on PATH" >&2
  exit 3
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# apt-get download writes as the unprivileged _apt user where it can.
chmod 0777 "$tmp"
echo ">> taking bin/$name from Debian's prometheus package"
download() { (cd "$tmp" && apt-get download -qq prometheus); }
if ! download 2>/dev/null; then
  if [ "$(id -u)" != 0 ]; then
    echo "apt-get cannot find the prometheus package, and refreshing the package lists needs root; install $name on PATH" >&2
    exit 3
  fi
  apt-get update -qq
  download
fi
dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/root"
install -m 0755 "$tmp/root/usr/bin/$name" "$out"
"$out" --version | head -1
