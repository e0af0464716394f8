#!/usr/bin/env bash
# Builds one control-plane binary into bin/ unless it is already there.
# Usage: test/tools/build-bin.sh NAME
# The Kubernetes binaries take minutes and ~3 GB of build cache when cold, so
# this script never rebuilds a binary that exists.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin="$root/bin"
name=$1
out="$bin/$name"
mkdir -p "$bin"
if [ -x "$out" ]; then
  exit 0
fi

K8S_VERSION=v1.36.3
KWOK_VERSION=v0.8.0
pkg_version() {
  local v=$1 major minor
  major=${v#v}; major=${major%%.*}
  minor=${v#v*.}; minor=${minor%%.*}
  local flags=""
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $p.gitVersion=$v -X $p.gitMajor=$major -X $p.gitMinor=$minor"
    flags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$flags"
}

start=$(date +%s)
echo ">> building $name into bin/ (only once; a cold Kubernetes build takes several minutes)"
case "$name" in
  kube-apiserver|kube-controller-manager|kube-scheduler|kubectl)
    (cd "$root/test/tools/k8s" && CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w $(pkg_version $K8S_VERSION)" -o "$out.tmp" "k8s.io/kubernetes/cmd/$name")
    ;;
  etcd)
    (cd "$root/test/tools/etcd" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out.tmp" .)
    ;;
  kwok|kwokctl)
    GOBIN="$bin/.gobin" CGO_ENABLED=0 go install "sigs.k8s.io/kwok/cmd/$name@$KWOK_VERSION"
    mv "$bin/.gobin/$name" "$out.tmp"
    ;;
  *)
    echo "unknown binary $name" >&2; exit 2 ;;
esac
mv "$out.tmp" "$out"
echo ">> built bin/$name in $(( $(date +%s) - start ))s"
