package images

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// BusyboxContainer is a container of BusyboxRef, never pulled (the real node has
// it from the archive), that runs script with sh and asks for 10m of CPU
// and 16Mi: the real node is the host the tests run on.
func BusyboxContainer(name, script string) corev1.Container {
	return corev1.Container{
		Name: name, Image: BusyboxRef, ImagePullPolicy: corev1.PullNever,
		Command: []string{"sh", "-c", script},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("10m"),
			corev1.ResourceMemory: resource.MustParse("16Mi"),
		}},
	}
}

// IdleApp is an app container "app" that idles, and stops at once when its
// pod is deleted.
func IdleApp() corev1.Container {
	return BusyboxContainer("app", `trap 'exit 0' TERM; sleep 3600 & wait $!`)
}
