#!/usr/bin/env bash
# Builds bin/helm from the Go module proxy with the linker flags Helm's own
# Makefile sets for a release, unless bin/helm already reports that release.
# Usage: hack/build-helm.sh VERSION
# The module holds no Git metadata, so the commit is left out: `helm
# version` reports an empty GitCommit.
#
# Without these flags `helm version` reports only the major and minor
# (v3.22), and `helm template` and `helm lint` assume Kubernetes v1.20 when
# neither a cluster nor --kube-version says otherwise, so a chart whose
# kubeVersion requires a newer cluster fails to render. With them, helm
# assumes the Kubernetes version of the k8s.io/client-go it is built with
# (client-go v0.M.P is Kubernetes 1.M), as a released helm does.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
out="$bin/helm"
version=$1
mod=helm.sh/helm/v3

built() {
  [ -x "$out" ] && [ "$("$out" version --template '{{.Version}}' 2>/dev/null)" = "$version" ]
}
if built; then
  exit 0
fi

# The client-go version in Helm's go.mod, as Helm's Makefile reads it.
gomod=$(go list -m -f '{{.GoMod}}' "$mod@$version")
client_go=$(awk '$1 == "k8s.io/client-go" { print $2; exit }' "$gomod")
if [[ ! $client_go =~ ^v([0-9]+)\.([0-9]+)\. ]]; then
  echo "no k8s.io/client-go version in $gomod (found '$client_go')" >&2
  exit 1
fi
k8s_major=$(( BASH_REMATCH[1] + 1 ))
k8s_minor=${BASH_REMATCH[2]}

ldflags="-w -s"
ldflags+=" -X $mod/internal/version.version=$version"
ldflags+=" -X $mod/internal/version.metadata="
ldflags+=" -X $mod/internal/version.gitTreeState=clean"
ldflags+=" -X $mod/pkg/lint/rules.k8sVersionMajor=$k8s_major"
ldflags+=" -X $mod/pkg/lint/rules.k8sVersionMinor=$k8s_minor"
ldflags+=" -X $mod/pkg/chartutil.k8sVersionMajor=$k8s_major"
ldflags+=" -X $mod/pkg/chartutil.k8sVersionMinor=$k8s_minor"

echo ">> building bin/helm $version (Kubernetes $k8s_major.$k8s_minor by default)"
mkdir -p "$bin/.gobin"
GOBIN="$bin/.gobin" CGO_ENABLED=0 go install -trimpath -ldflags "$ldflags" "$mod/cmd/helm@$version"
mv "$bin/.gobin/helm" "$out"
if ! built; then
  echo "bin/helm reports '$("$out" version --template '{{.Version}}')', not '$version'" >&2
  exit 1
fi
