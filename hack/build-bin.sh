#!/usr/bin/env bash
# Builds one control-plane binary into bin/ unless it is already there.
# Usage: hack/build-bin.sh NAME
# The Kubernetes binaries take minutes each and ~3 GB of build cache when
# cold, so this script never rebuilds a binary that exists, and says every
# 20 s that it is still working.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
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
echo ">> building bin/$name (only once; a cold Kubernetes build takes minutes)"

# A progress line every 20 s, so that a cold build never looks hung. The
# ticker is this script's own child, ended by its PID on any exit.
(
  trap 'kill "$nap" 2>/dev/null; exit 0' TERM
  while :; do
    sleep 20 & nap=$!
    wait "$nap"
    echo ">> still building bin/$name ($(( $(date +%s) - start ))s so far)"
  done
) &
ticker=$!
trap 'kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null || true' EXIT

case "$name" in
  kube-apiserver|kube-controller-manager|kube-scheduler|kubectl|kubelet)
    (cd "$root/hack/tools/k8s" && CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w $(pkg_version $K8S_VERSION)" -o "$out.tmp" "k8s.io/kubernetes/cmd/$name")
    ;;
  etcd)
    (cd "$root/hack/tools/etcd" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out.tmp" .)
    ;;
  kwok|kwokctl)
    GOBIN="$bin/.gobin" CGO_ENABLED=0 go install "sigs.k8s.io/kwok/cmd/$name@$KWOK_VERSION"
    mv "$bin/.gobin/$name" "$out.tmp"
    ;;
  csi-provisioner|csi-attacher)
    # The kubernetes-csi sidecars, each with its go.mod's replace directives
    # (hack/tools/$name), at the version that module requires.
    mod=$(cd "$root/hack/tools/$name" && go list -m -f '{{.Path}} {{.Version}}' all | grep "^github.com/kubernetes-csi/external-${name#csi-}/")
    (cd "$root/hack/tools/$name" && CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X main.version=${mod##* }" -o "$out.tmp" "${mod%% *}/cmd/$name")
    ;;
  *)
    echo "unknown binary $name" >&2; exit 2 ;;
esac
mv "$out.tmp" "$out"
echo ">> built bin/$name in $(( $(date +%s) - start ))s"
