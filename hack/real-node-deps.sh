#!/usr/bin/env bash
# Installs the Debian packages the real-node tier needs when they are
# missing: containerd, runc, the CNI plugins, iptables, conntrack and a
# static busybox (for the test images). Prints one line and exits 3, without
# installing anything, where it cannot (not root, or no apt-get): the tier
# is then skipped with that line as its reason.
set -euo pipefail
need=()
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
command -v iptables >/dev/null || need+=(iptables)
command -v conntrack >/dev/null || need+=(conntrack)
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "real-node tier skipped: needs ${need[*]}, and installing them needs root and apt-get" >&2
  exit 3
fi
echo ">> installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
