package controllers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

func TestSidecarFailure(t *testing.T) {
	exited := func(name string, code int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
	}
	restartedAfter := func(name string, code int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, RestartCount: 1,
			State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
	}
	running := corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	deleting := metav1.NewTime(fixtures.Epoch)

	native := []corev1.Container{{Name: "sidecar", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
	cases := map[string]struct {
		inits             []corev1.Container
		phase             corev1.PodPhase
		deletionTimestamp *metav1.Time
		init, containers  []corev1.ContainerStatus
		wantCode          int32
		wantFailed        bool
	}{
		"container sidecar exited 1":                  {containers: []corev1.ContainerStatus{running, exited("sidecar", 1)}, wantCode: 1, wantFailed: true},
		"container sidecar exited 2 before restart":   {containers: []corev1.ContainerStatus{running, restartedAfter("sidecar", 2)}, wantCode: 2, wantFailed: true},
		"native sidecar exited 1":                     {init: []corev1.ContainerStatus{exited("sidecar", 1)}, containers: []corev1.ContainerStatus{running}, wantCode: 1, wantFailed: true},
		"native sidecar restarted after exit 137":     {init: []corev1.ContainerStatus{restartedAfter("sidecar", 137)}, containers: []corev1.ContainerStatus{running}, wantCode: 137, wantFailed: true},
		"native sidecar exited 0":                     {init: []corev1.ContainerStatus{exited("sidecar", 0)}, containers: []corev1.ContainerStatus{running}},
		"another init container exited 1":             {init: []corev1.ContainerStatus{exited("setup", 1), {Name: "sidecar"}}, containers: []corev1.ContainerStatus{running}},
		"the app exited 1":                            {containers: []corev1.ContainerStatus{exited("app", 1), {Name: "sidecar"}}},
		"pod being deleted, sidecar stopped with 143": {deletionTimestamp: &deleting, init: []corev1.ContainerStatus{exited("sidecar", 143)}, containers: []corev1.ContainerStatus{running}},
		"pod evicted (Failed), sidecar killed":        {phase: corev1.PodFailed, init: []corev1.ContainerStatus{exited("sidecar", 137)}, containers: []corev1.ContainerStatus{exited("app", 137)}},
		"pod Succeeded, sidecar stopped with 143":     {phase: corev1.PodSucceeded, init: []corev1.ContainerStatus{exited("sidecar", 143)}, containers: []corev1.ContainerStatus{exited("app", 0)}},
		"native sidecar stopped with 143 after the app, pod still Running": {
			inits: native, init: []corev1.ContainerStatus{exited("sidecar", 143)}, containers: []corev1.ContainerStatus{exited("app", 0)}},
		"native sidecar exited 1 while the app runs": {
			inits: native, init: []corev1.ContainerStatus{exited("sidecar", 1)}, containers: []corev1.ContainerStatus{running}, wantCode: 1, wantFailed: true},
		"container sidecar exited 1 after the app": {
			containers: []corev1.ContainerStatus{exited("app", 0), exited("sidecar", 1)}, wantCode: 1, wantFailed: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			phase := tc.phase
			if phase == "" {
				phase = corev1.PodRunning
			}
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", DeletionTimestamp: tc.deletionTimestamp},
				Spec:       corev1.PodSpec{InitContainers: tc.inits, Containers: []corev1.Container{{Name: "app"}}},
				Status:     corev1.PodStatus{Phase: phase, InitContainerStatuses: tc.init, ContainerStatuses: tc.containers},
			}
			code, failed := sidecarFailure(pod, "sidecar")
			if code != tc.wantCode || failed != tc.wantFailed {
				t.Errorf("sidecarFailure = (%d, %v), want (%d, %v)", code, failed, tc.wantCode, tc.wantFailed)
			}
		})
	}
}

func TestSidecarMayHaveFailed(t *testing.T) {
	exited := func(name string, code int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
	}
	running := corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	cases := map[string]struct {
		sidecar    string
		containers []corev1.ContainerStatus
		want       bool
	}{
		"starting, no status yet":                 {sidecar: "sidecar"},
		"running":                                 {sidecar: "sidecar", containers: []corev1.ContainerStatus{running, {Name: "sidecar"}}},
		"the named sidecar exited 1":              {sidecar: "sidecar", containers: []corev1.ContainerStatus{running, exited("sidecar", 1)}, want: true},
		"the app exited 1":                        {sidecar: "sidecar", containers: []corev1.ContainerStatus{exited("app", 1), {Name: "sidecar"}}},
		"admitted by an earlier version, running": {containers: []corev1.ContainerStatus{running}, want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p"},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}, {Name: "sidecar"}}},
				Status:     corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: tc.containers},
			}
			if tc.sidecar != "" {
				pod.Annotations = map[string]string{v1alpha1.SidecarAnnotationKey: tc.sidecar}
			}
			if got := sidecarMayHaveFailed(pod); got != tc.want {
				t.Errorf("sidecarMayHaveFailed = %v, want %v", got, tc.want)
			}
		})
	}
}
