// Package cluster brings up a simulated multi-zone Kubernetes cluster for
// the end-to-end tests and the demo: kwokctl's binary runtime runs etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler and the kwok
// controller from bin/ (v1.36.3, kwok v0.8.0; no Docker, no network), kwok
// fakes the nodes and the kubelet, and the test provisioner
// (test/provisioner) provisions zonal hostPath volumes.
//
// What Up creates:
//   - nodes kwok-<zone>-<i> (2 per zone in zone-a, zone-b, zone-c), labelled
//     topology.kubernetes.io/zone, topology.gke.io/zone (the same zone),
//     kubernetes.io/hostname, cloud.google.com/gke-nodepool (logging in
//     zone-b, default elsewhere) and type=kwok, not tainted, with 1000 CPUs, 4Ti of memory and 1000 pods (fake nodes cost
//     nothing; capacity should never limit a benchmark);
//   - StorageClass "standard" (default, WaitForFirstConsumer, Delete) and
//     "standard-immediate" (Immediate, Delete), both of ProvisionerName;
//   - the provisioner process (bin/test-provisioner, built when missing or
//     older than its sources), log in .kwok/<name>/provisioner.log, PID in
//     .kwok/<name>/provisioner.pid;
//   - kwok's default Stages (DefaultStages) plus Options.ExtraStages, e.g.
//     E2EStages: SidecarFailStage, NativeSidecarFailStage and JobFailStage.
//
// State: ours in <repo>/.kwok/<name> (kubeconfig, kwokctl.yaml, kwokctl.log,
// provisioner.*, operator.*, certs/), kwokctl's in <repo>/.kwok/clusters/<name>
// (logs/ of the control plane, pids/). Down removes both and ends every
// process by its PID.
//
// In a test:
//
//	c, err := cluster.Up(ctx, cluster.Options{ProvisionerDelay: time.Second, ExtraStages: cluster.E2EStages()})
//	defer c.Down()
//	op, err := cluster.RunOperator(ctx, c, cluster.OperatorOptions{Args: []string{"--orphan-grace-period=10s", "--allow-short-orphan-grace-period"}})
//	defer op.Stop()
//
// The command test/cluster/cmd/kwokcluster does the same from a shell; the
// processes it starts run on in the background until "down":
//
//	go run ./test/cluster/cmd/kwokcluster [flags] up
//	go run ./test/cluster/cmd/kwokcluster [flags] operator [-- MANAGER-FLAGS...]
//	go run ./test/cluster/cmd/kwokcluster [flags] dry-run-deploy
//	go run ./test/cluster/cmd/kwokcluster [flags] down
//
// Flags (before the command):
//
//	-name string          cluster name (default "fluent-pvc-operator")
//	-delay duration       up: provisioning delay per volume (default 5s)
//	-zones string         up: comma-separated zones (default "zone-a,zone-b,zone-c")
//	-nodes-per-zone int   up: nodes per zone (default 2)
//	-e2e-stages           up: add E2EStages to kwok's stages (default true)
//	-real-node            up: add the real node (Options.RealNode)
//
// After up, point bin/kubectl at the cluster and keep its cache out of ~/.kube:
//
//	export KUBECONFIG=$PWD/.kwok/<name>/kubeconfig KUBECACHEDIR=$PWD/.kwok/<name>/kubectl-cache
//
// dry-run-deploy honours KUSTOMIZE (see DefaultKustomize).
//
// Run the smoke test of this tooling with E2E_CLUSTER=1 go test ./test/cluster.
package cluster
