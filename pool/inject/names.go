// Package inject holds the pure builders that both the webhook and the
// controllers need: the pod mutation, the claim, the binding and the
// finalizer Job made from a FluentPVC. Nothing here talks to the API server.
package inject

import (
	"fmt"
	"strings"

	utilrand "k8s.io/apimachinery/pkg/util/rand"
)

const (
	// maxPrefixLen keeps claim names short enough that a drain Job name
	// "<claim>-drain-<n>" stays within the 63 characters of a label value.
	maxPrefixLen = 40
	suffixLen    = 10
)

// ClaimName returns a fresh name for a claim and its binding made from the
// FluentPVC fluentPVCName: a readable prefix from that name and a random
// suffix. The result is a DNS-1123 label of at most 51 characters whatever
// the FluentPVC's name length.
func ClaimName(fluentPVCName string) string {
	return claimName(fluentPVCName, utilrand.String(suffixLen))
}

func claimName(fluentPVCName, suffix string) string {
	prefix := strings.ReplaceAll(fluentPVCName, ".", "-")
	if len(prefix) > maxPrefixLen {
		prefix = prefix[:maxPrefixLen]
	}
	prefix = strings.TrimRight(prefix, "-")
	if prefix == "" {
		prefix = "fluent-pvc"
	}
	return prefix + "-" + suffix
}

// DrainJobName is the deterministic name of a claim's attempt-th finalizer
// Job, so that a restarted operator finds the Job it started before.
func DrainJobName(claimName string, attempt int32) string {
	return fmt.Sprintf("%s-drain-%d", claimName, attempt)
}
