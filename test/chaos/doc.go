// Package chaos is the fault-injection suite: the operator runs
// as two replicas with leader election on the kwok cluster, both serving
// the webhook behind a round-robin TLS pass-through, and reaches the API
// server through a proxy that delays requests, cuts watches and fails some
// requests with 429 and 500. While labelled pods come and go (Deployments
// scaled up and down, bare pods), faults strike at random: a replica is
// SIGKILLed and restarted, drain Jobs fail, sidecars fail, namespaces are
// deleted under running pods, the FluentPVC's templates and pool size
// change, bindings lose their finalizers and are deleted, opt-in labels
// are removed from running pods, and pods are created from copied
// manifests.
//
// The judge is independent of the operator: after the load stops and the
// system settles, the oracle package reads only the kube-apiserver audit
// log and the final state, and counts violations of the invariants I1-I4.
//
// Run it with `make chaos` (the full run, CHAOS=full, at least 300 pods,
// results in test/chaos/results/latest.md); `make test` runs a reduced run
// of about two minutes (CHAOS=reduced). Without CHAOS the test is skipped.
package chaos
