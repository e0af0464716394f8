# fluent-pvc-operator
#
# make test   builds what is missing (control-plane binaries into bin/, once)
#             and runs every suite.
# make help   lists the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

IMG ?= fluent-pvc-operator:latest
BIN := $(CURDIR)/bin
# bin/kubectl (make bins) when it is there, else the one on PATH.
KUBECTL ?= $(if $(wildcard $(BIN)/kubectl),$(BIN)/kubectl,kubectl)
DEPLOY_NAMESPACE := fluent-pvc-operator-system
DEPLOY_TIMEOUT ?= 3m
CONTROLLER_GEN := go run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0
KUSTOMIZE := go run sigs.k8s.io/kustomize/kustomize/v5@v5.8.1
GOLANGCI_LINT := go run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0
# golangci-lint v2.15.0 with kube-api-linter compiled in as a module plugin;
# both versions are pinned in hack/tools/lint/go.mod (golangci-lint custom
# would git-clone golangci-lint from GitHub, which a machine with only the Go
# module proxy cannot). Rebuilt only when that module changes.
KAL := $(BIN)/golangci-lint-kube-api-linter
# Helm from the Go module proxy (make helm), for the chart's lint, template
# and install, built with the linker flags of Helm's release build
# (hack/build-helm.sh): `helm version` reports HELM_VERSION, and `helm
# template` and `helm lint` assume the Kubernetes version Helm is built
# against rather than v1.20.
CHART := charts/fluent-pvc-operator
HELM_VERSION := v3.22.0
HELM := $(BIN)/helm
RELEASE_IMG ?= fluent-pvc-operator.local/manager:dev
GINKGO_FLAGS ?=
# Embedded core types whose field descriptions are dropped from the CRD so
# that it fits a client-side `kubectl apply`, and strings in them bounded so
# that the CEL rules on them fit the API server's cost budget
# (see hack/crdtrim).
CRD_TRIM_PATHS := spec.pvcSpecTemplate spec.pvcFinalizerJobSpecTemplate spec.sidecarContainerTemplate \
	spec.commonEnvs spec.commonVolumes spec.commonVolumeMounts \
	spec.sidecarContainerTemplate.name=63 spec.commonVolumes[].name=63 \
	spec.commonVolumeMounts[].name=63 spec.commonVolumeMounts[].mountPath=4096

CONTROL_PLANE := etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok kwokctl
CONTROL_PLANE_BINS := $(addprefix $(BIN)/,$(CONTROL_PLANE))
# The real-node tier adds a kubelet beside kwok's fake nodes.
REAL_NODE := kubelet
REAL_NODE_BINS := $(addprefix $(BIN)/,$(REAL_NODE))
# The kubernetes-csi sidecars in front of test/csidriver.
CSI := csi-provisioner csi-attacher
CSI_BINS := $(addprefix $(BIN)/,$(CSI))
# One real node runs on a machine at a time; its runs take this lock.
REAL_NODE_LOCK := /tmp/fpvc-realnode.lock

export KUBEBUILDER_ASSETS := $(BIN)

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "}{printf "  %-16s %s\n", $$1, $$2}'

##@ Development

.PHONY: generate
generate: ## Generate deep-copy code.
	$(CONTROLLER_GEN) object paths=./apis/...

.PHONY: manifests
manifests: ## Generate CRDs, RBAC and webhook manifests into config/.
	$(CONTROLLER_GEN) crd:generateEmbeddedObjectMeta=true rbac:roleName=manager-role webhook paths=./... \
		output:crd:artifacts:config=config/crd/bases \
		output:rbac:artifacts:config=config/rbac \
		output:webhook:artifacts:config=config/webhook
	go run ./hack/crdtrim config/crd/bases/fluent-pvc-operator.tech.zozo.com_fluentpvcs.yaml $(CRD_TRIM_PATHS)
	@# The Helm chart takes the same CRDs, RBAC rules and webhooks, never edited twice.
	cp config/crd/bases/*.yaml $(CHART)/crds/
	cp config/rbac/role.yaml $(CHART)/files/role.yaml
	cp config/rbac/leader_election_role.yaml $(CHART)/files/leader_election_role.yaml
	cp config/webhook/manifests.yaml $(CHART)/files/webhooks.yaml

.PHONY: verify
verify: generate manifests $(HELM) ## Regenerate and fail on any diff, untracked generated file, unformatted Go file, or tracked binary or file over 1 MiB.
	@hack/check-tracked-files.sh --self-test
	@hack/check-tracked-files.sh
	@if [ -n "$$(git status --porcelain -- apis config $(CHART))" ]; then \
		echo "generated files are out of date; run 'make generate manifests' and commit:"; \
		git status --porcelain -- apis config $(CHART); exit 1; fi
	@# The chart renders what config/default does, but for the differences
	@# test/helm declares.
	HELM=$(HELM) go test ./test/helm -count=1
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then \
		echo "go files are not formatted; run 'make fmt':"; echo "$$unformatted"; exit 1; fi

##@ Release


# Checked on every use: the script rebuilds bin/helm only when the binary
# there does not report HELM_VERSION (e.g. one built without the release's
# linker flags).
$(HELM): FORCE
	@hack/build-helm.sh $(HELM_VERSION)

.PHONY: FORCE
FORCE:

.PHONY: helm
helm: $(HELM) ## Build helm (from the Go module proxy) into bin/.

.PHONY: helm-lint
helm-lint: $(HELM) ## Lint the chart with its default and cert-manager values.
	$(HELM) lint --strict $(CHART)
	$(HELM) lint --strict $(CHART) --set certManagement.mode=cert-manager

.PHONY: release-manifests
release-manifests: ## Write dist/install.yaml, config/default as one file with RELEASE_IMG, for kubectl apply -f.
	@rm -rf $(DEPLOY_DIR) && mkdir -p $(DEPLOY_DIR) dist
	cd $(DEPLOY_DIR) && $(KUSTOMIZE) create --resources ../../config/default && $(KUSTOMIZE) edit set image controller=$(RELEASE_IMG)
	$(KUSTOMIZE) build $(DEPLOY_DIR) > dist/install.yaml
	@echo "dist/install.yaml: $$(grep -c '^kind:' dist/install.yaml) objects, image $(RELEASE_IMG)"

.PHONY: fmt
fmt: ## Run go fmt.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: $(KAL) $(HELM) ## Run golangci-lint (.golangci.yaml) on all the code, kube-api-linter (.golangci-kal.yaml) on apis/, and helm lint on the chart.
	@rc=0; \
	$(GOLANGCI_LINT) run || rc=1; \
	$(KAL) run -c .golangci-kal.yaml ./apis/... || rc=1; \
	$(MAKE) --no-print-directory helm-lint >/dev/null || { $(MAKE) --no-print-directory helm-lint; rc=1; }; \
	exit $$rc

.PHONY: lint-fix
lint-fix: ## Apply the formatters (goimports) and the linters' suggested fixes.
	$(GOLANGCI_LINT) fmt
	$(GOLANGCI_LINT) run --fix

$(KAL): hack/tools/lint/go.mod hack/tools/lint/go.sum
	go build -C hack/tools/lint -o $@ sigs.k8s.io/kube-api-linter/cmd/golangci-lint-kube-api-linter

.PHONY: build
build: ## Build the manager binary into bin/manager.
	CGO_ENABLED=0 go build -trimpath -o $(BIN)/manager .

.PHONY: run
run: ## Run the manager against the cluster of the current kubeconfig.
	go run . --leader-elect=false

##@ Test

.PHONY: bins
bins: $(CONTROL_PLANE_BINS) ## Build the control-plane binaries into bin/ (only the missing ones).

.PHONY: real-node-bins
real-node-bins: $(REAL_NODE_BINS) ## Build the kubelet of the real-node tier into bin/ and install its Debian packages when missing (containerd, runc, CNI plugins; needs root and apt-get).
	@hack/real-node-deps.sh

.PHONY: csi-bins
csi-bins: $(CSI_BINS) ## Build the kubernetes-csi external-provisioner and external-attacher into bin/ (only the missing ones).

.PHONY: images
images: ## Write the operator, busybox and pause images (no Docker) to bin/images.tar, for `ctr -n k8s.io images import`.
	@hack/real-node-deps.sh
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o $(BIN)/manager-linux .
	go run ./test/images/cmd/imagearchive -manager $(BIN)/manager-linux -busybox /bin/busybox -o $(BIN)/images.tar

$(BIN)/%:
	@hack/build-bin.sh $*

.PHONY: test
test: bins vet $(HELM) ## Run every suite: unit, integration (envtest), end-to-end (kwok), the CSI smoke test, a reduced fault-injection run, the real-node smoke test and end-to-end suite, and a reduced benchmark.
	$(MAKE) test-unit
	$(MAKE) test-integration
	$(MAKE) test-e2e
	$(MAKE) test-csi
	$(MAKE) chaos-reduced
	$(MAKE) test-real-node
	$(MAKE) test-e2e-real
	$(MAKE) bench-smoke

# Every package's envtest suite is TestIntegration and the kwok suite is
# TestE2E, so a tier is a -run or -skip of those names.
.PHONY: test-unit
test-unit: ## Run the unit tests (no API server, no binaries needed).
	KUBEBUILDER_ASSETS= go test ./... -count=1 -skip '^(TestIntegration|TestE2E)$$' $(GO_TEST_FLAGS)

.PHONY: test-integration
test-integration: bins ## Run the envtest suites (a real kube-apiserver and etcd from bin/).
	go test ./... -count=1 -timeout 30m -run '^TestIntegration$$' $(GO_TEST_FLAGS) $(GINKGO_FLAGS)

.PHONY: test-e2e
test-e2e: bins csi-bins ## Run the end-to-end suite on a simulated cluster (kwok), with the CSI driver behind the real external-provisioner and external-attacher beside the hostPath provisioner.
	go test ./test/e2e -count=1 -timeout 30m -v -run '^TestE2E$$' $(GINKGO_FLAGS)

.PHONY: test-csi
test-csi: bins csi-bins ## Run the CSI tests: test/csidriver behind the real external-provisioner and external-attacher on a simulated cluster (provision in the pod's zone, attach, detach, delete), then on the real node (the kubelet registers the driver, stages and publishes a volume for a real container) where the machine can run one.
	CSI_CLUSTER=1 go test ./test/cluster -count=1 -timeout 10m -v -run '^TestCSISmoke$$'
	@if hack/real-node-deps.sh; then \
		$(MAKE) real-node-bins images && \
		CSI_CLUSTER=1 REAL_NODE=1 flock $(REAL_NODE_LOCK) go test ./test/cluster -count=1 -timeout 10m -v -run '^TestCSIRealNode$$'; \
	else \
		echo "CSI real-node test skipped: see the line above"; \
	fi

.PHONY: test-real-node
test-real-node: bins ## Run the real-node tier: a kubelet with containerd beside kwok's nodes, real containers from images built here (skipped, with its reason, where the machine cannot).
	@if hack/real-node-deps.sh; then \
		$(MAKE) real-node-bins images && \
		REAL_NODE=1 flock $(REAL_NODE_LOCK) go test ./test/cluster -count=1 -timeout 10m -v -run '^TestRealNodeSmoke$$'; \
	else \
		echo "real-node tier skipped: see the line above"; \
	fi

.PHONY: test-e2e-real
test-e2e-real: bins csi-bins $(HELM) ## Run the end-to-end suite on the real node: the operator installed by make deploy and by Helm (install, upgrade, reinstall), real containers, storage from the CSI driver behind the real external-provisioner and external-attacher (skipped, with its reason, where the machine cannot).
	@if hack/real-node-deps.sh; then \
		$(MAKE) real-node-bins images && \
		REAL_NODE=1 flock $(REAL_NODE_LOCK) go test ./test/realnode -count=1 -timeout 30m -v -run '^TestE2EReal$$' -ginkgo.v $(GINKGO_FLAGS); \
	else \
		echo "real-node tier skipped: see the line above"; \
	fi

.PHONY: chaos
chaos: bins csi-bins ## Run the full fault-injection suite (two replicas, API faults, SIGKILLs; >= 300 pods, under 15 min); results in test/chaos/results/latest.md.
	CHAOS=full go test ./test/chaos -count=1 -timeout 30m -v -run '^TestChaos$$'

.PHONY: chaos-reduced
chaos-reduced: bins csi-bins ## Run a reduced fault-injection run (about 2 min); results in test/chaos/results/reduced.md (not tracked).
	CHAOS=reduced go test ./test/chaos -count=1 -timeout 20m -v -run '^TestChaos$$'

##@ Benchmarks

.PHONY: bench
bench: bins ## Measure pod start-up (modes a-e and the no-op webhook control w), admission latency, bursts, memory, API cost and the checkout with 1,000 more nodes on a simulated cluster, then, where the machine can run the real node, a, d and e there with hostPath volumes and a-e with CSI volumes that must be attached and formatted; results in test/bench/results/ (about 15 min).
	@if hack/real-node-deps.sh; then $(MAKE) --no-print-directory real-node-bins images csi-bins || echo "bench: could not prepare the real node (see above)"; fi
	flock $(REAL_NODE_LOCK) go run ./test/bench $(BENCH_FLAGS)

.PHONY: bench-smoke
bench-smoke: bins ## Run the benchmark's reduced mode (a few pods per mode, every tier) to check that it still works (about 5 min).
	@if hack/real-node-deps.sh; then $(MAKE) --no-print-directory real-node-bins images csi-bins || echo "bench: could not prepare the real node (see above)"; fi
	flock $(REAL_NODE_LOCK) go run ./test/bench -smoke

##@ Demo

.PHONY: demo
demo: bins ## Start a local cluster with the operator and show pods starting from the warm pool: real containers on a real node where the machine can run one (until make demo-down, no other real node can run), else simulated by kwok, saying why (DEMO_TIER=kwok chooses kwok).
	@if [ "$(DEMO_TIER)" != kwok ] && hack/real-node-deps.sh; then \
		$(MAKE) --no-print-directory real-node-bins images csi-bins || echo "demo: could not prepare the real node (see above)"; \
		DEMO_TIER=$(DEMO_TIER) flock $(REAL_NODE_LOCK) go run ./test/demo; \
	else \
		DEMO_TIER=$(DEMO_TIER) go run ./test/demo; \
	fi

.PHONY: demo-down
demo-down: ## Stop the demo cluster and operator and remove their state.
	go run ./test/cluster/cmd/kwokcluster -name demo down

##@ Deployment

.PHONY: docker-build
docker-build: ## Build the operator image IMG (needs a Docker engine).
	docker build -t $(IMG) .

.PHONY: install
install: ## Install the CRDs into the cluster of the current kubeconfig.
	$(KUBECTL) apply -f config/crd/bases

# deploy renders config/default with IMG through an overlay under bin/, so
# that the tracked kustomization is never edited.
DEPLOY_DIR := $(BIN)/deploy

.PHONY: deploy
deploy: ## Deploy the operator (config/default, as dist/install.yaml) with image IMG into the cluster of the current kubeconfig, and wait until it serves.
	$(MAKE) --no-print-directory release-manifests RELEASE_IMG=$(IMG)
	$(KUBECTL) apply -f dist/install.yaml
	$(KUBECTL) -n $(DEPLOY_NAMESPACE) rollout status deployment/fluent-pvc-operator-controller-manager --timeout=$(DEPLOY_TIMEOUT)

.PHONY: undeploy
undeploy: ## Remove the operator from the cluster of the current kubeconfig; its CRDs, FluentPVCs, bindings and claims stay, and a later deploy resumes their drains.
	$(KUSTOMIZE) build config/default | $(KUBECTL) delete --ignore-not-found --wait=true -l 'app.kubernetes.io/component!=crd' -f -
