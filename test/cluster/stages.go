package cluster

import (
	_ "embed"
	"strings"
)

// Labels that the e2e stages react to.
const (
	// SidecarFailLabelKey: a pod labelled with it ("true") has its container
	// named "sidecar" terminate with exit code 1 (SidecarFailStage).
	SidecarFailLabelKey = "e2e.fluent-pvc-operator/sidecar-fail"
	// JobFailLabelKey: a pod labelled with it ("true") fails (JobFailStage).
	JobFailLabelKey = "e2e.fluent-pvc-operator/job-fail"
	// ExitCodeAnnotationKey: the exit code of the regular containers of a
	// pod with restartPolicy Never or OnFailure annotated with it, as a
	// decimal string (DefaultStages).
	ExitCodeAnnotationKey = "e2e.fluent-pvc-operator/exit-code"
)

var (
	//go:embed stages/node-initialize.yaml
	stageNodeInitialize string
	//go:embed stages/node-heartbeat-with-lease.yaml
	stageNodeHeartbeat string
	//go:embed stages/pod-ready.yaml
	stagePodReady string
	//go:embed stages/pod-app-exit.yaml
	stagePodAppExit string
	//go:embed stages/pod-sidecar-stop.yaml
	stagePodSidecarStop string
	//go:embed stages/pod-container-restart.yaml
	stagePodContainerRestart string
	//go:embed stages/pod-finish.yaml
	stagePodFinish string
	//go:embed stages/pod-delete.yaml
	stagePodDelete string

	// SidecarFailStage is a kwok Stage: one second after the container named
	// "sidecar" of a Running pod labelled SidecarFailLabelKey="true" started,
	// it terminates with exit code 1; the pod stays Running, not Ready.
	//go:embed stages/e2e-sidecar-fail.yaml
	SidecarFailStage string

	// NativeSidecarFailStage is SidecarFailStage for a native sidecar: the
	// init container named "sidecar" (restartPolicy Always) exits 1 and is
	// restarted, as a kubelet restarts it: the exit in lastState, once a
	// second until the pod is deleted.
	//go:embed stages/e2e-native-sidecar-fail.yaml
	NativeSidecarFailStage string

	// JobFailStage is a kwok Stage: a Running pod labelled
	// JobFailLabelKey="true" goes to phase Failed with every container
	// terminated with exit code 1. Label a Job's pod template with it to fail
	// the Job (after its backoffLimit).
	//go:embed stages/e2e-job-fail.yaml
	JobFailStage string
)

// DefaultStages are the Stages of every cluster: kwokctl v0.8.0's defaults
// (nodes become Ready and renew their lease; pods become Running and Ready
// at once; deleted pods go away), except that a Job's pod no longer simply
// Succeeds. The regular containers of a pod that runs to completion
// (restartPolicy Never or OnFailure, as a Job's) exit (pod-app-exit: with
// the code of the pod's ExitCodeAnnotationKey, 0 without it), apart from a
// sidecar the operator appended in sidecarMode Container; once none runs,
// native sidecars are stopped a second later, exiting 143 as on SIGTERM
// (pod-sidecar-stop), and then the pod finishes (pod-finish: Succeeded or
// Failed by the app's exit codes). A pod with restartPolicy OnFailure has
// a container that exited non-zero restarted instead, a second later
// (pod-container-restart), until its Job's backoffLimit ends it. kwokctl
// drops its defaults as soon as the configuration names any Stage, so Up
// always writes these next to Options.ExtraStages.
func DefaultStages() []string {
	return []string{stageNodeInitialize, stageNodeHeartbeat, stagePodReady, stagePodAppExit, stagePodContainerRestart, stagePodSidecarStop, stagePodFinish, stagePodDelete}
}

// E2EStages are the Stages the e2e suite adds to the defaults:
// SidecarFailStage, NativeSidecarFailStage and JobFailStage.
func E2EStages() []string {
	return []string{SidecarFailStage, NativeSidecarFailStage, JobFailStage}
}

// kwokctlConfig is the multi-document --config of kwokctl create cluster.
func kwokctlConfig(kubectl string, stages []string, realNode, traceGC bool) string {
	var b strings.Builder
	b.WriteString("apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokctlConfiguration\noptions:\n")
	b.WriteString("  kubectlBinary: " + quote(kubectl) + "\n")
	if realNode {
		// Pods reach the API server at the kubernetes Service's IP
		// (realServiceNAT), so its certificate names that IP too.
		b.WriteString("  kubeApiserverCertSANs:\n  - " + kubernetesServiceIP + "\n")
	}
	// OpenShift and other hardened clusters run this plugin: an owner
	// reference that blocks its owner's deletion needs update on the
	// owner's finalizers subresource. The e2e operator runs with the RBAC
	// of config/default, so a missing verb fails a spec here first.
	b.WriteString("componentsPatches:\n- name: kube-apiserver\n  extraArgs:\n")
	b.WriteString("  - key: enable-admission-plugins\n    value: OwnerReferencesPermissionEnforcement\n")
	if realNode {
		// kubectl logs and exec reach the kubelet by its IP, and kwok
		// leaves the real node alone (the last of a repeated flag wins).
		b.WriteString("  - key: kubelet-preferred-address-types\n    value: InternalIP,Hostname\n")
		// Webhooks are called at their Service's endpoints (pod IPs on the
		// node's bridge), as there is no kube-proxy.
		b.WriteString("  - key: enable-aggregator-routing\n    value: \"true\"\n")
	}
	if traceGC {
		// One line per garbage collection (Cluster.APIServerGCs).
		b.WriteString("  extraEnvs:\n  - name: GODEBUG\n    value: gctrace=1\n")
	}
	if realNode {
		b.WriteString("- name: kwok-controller\n  extraArgs:\n")
		b.WriteString("  - key: manage-all-nodes\n    value: \"false\"\n")
		b.WriteString("  - key: manage-nodes-with-label-selector\n    value: " + NodeTypeLabelKey + "=kwok\n")
	}
	for _, s := range stages {
		b.WriteString("---\n")
		b.WriteString(strings.TrimSpace(s))
		b.WriteString("\n")
	}
	return b.String()
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }
