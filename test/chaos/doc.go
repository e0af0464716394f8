// Package chaos is the fault-injection suite: the operator runs
// as two replicas with leader election on the kwok cluster, both serving
// the webhook behind a round-robin TLS pass-through, and reaches the API
// server through a proxy that delays requests, cuts watches and fails some
// requests with 429 and 500. While labelled pods come and go (Deployments
// scaled up and down, bare pods), faults strike at random: a replica is
// SIGKILLed and restarted, drain Jobs fail, sidecars fail, namespaces are
// deleted under running pods, the FluentPVC's templates, pool size and
// reservations ahead (each replica reserves warm PVCs before the pods
// come, for at most a minute, extended while kept) change, bindings lose their finalizers and are deleted, opt-in labels
// are removed from running pods, and pods are created from copied
// manifests. Users copy running pods without their labels (as `kubectl
// debug --copy-to` does) and delete held claims, sometimes while the claim
// webhook is unreachable, then give up an admitted one's data as the
// operations guide says. For a window in one namespace, a
// ValidatingAdmissionPolicy refuses every write of FluentPVCBindings while
// pods are created there, some of which are deleted and stripped of their
// pod-protection finalizer before they are recorded; a ResourceQuota
// allows no bindings; or a policy refuses the drain Jobs' pods. A second
// FluentPVC takes node-local claims, and a node holding some is deleted
// and made again 30-60 s later. A third takes its claims from CSI storage
// that attaches (cluster.StartCSI), so its pool keeps each warm PVC staged
// on a node by a holder pod: holders are killed as a preemption would,
// and a node with holders is deleted and made again, with its CSINode,
// 30-60 s later.
//
// The judge is independent of the operator: after the load stops and the
// system settles, the oracle package reads only the kube-apiserver audit
// log and the final state, and counts violations of the invariants I1-I5.
// Every pod that mounts a claim counts, labelled or not, but a holder the
// operator made (its requests reach the API server as operatorUser, which
// the proxy impersonates); a release that follows a user's deletion of
// the claim is excused, as is one that follows its namespace's deletion.
//
// Run it with `make chaos` (the full run, CHAOS=full, at least 300 pods,
// results in test/chaos/results/latest.md); `make test` runs a reduced run
// of about two minutes (CHAOS=reduced). Without CHAOS the test is skipped.
package chaos
