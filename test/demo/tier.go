package main

import "fmt"

// tier is what the demo runs on.
type tier string

const (
	// tierReal adds the real node (test/cluster's Options.RealNode): the
	// pods, their sidecars and the drain Jobs are busybox containers that
	// containerd runs on the host.
	tierReal tier = "real"
	// tierKwok is kwok alone: every node, pod and Job is simulated.
	tierKwok tier = "kwok"
	// tierAuto is the real node where the machine can run it, else kwok.
	tierAuto tier = "auto"
)

// chooseTier decides the tier from the one asked for (DEMO_TIER or -tier;
// empty means auto) and why the machine cannot run the real node ("" when
// it can). It returns the tier and, when the demo falls back to kwok or
// kwok was asked for, the one-line reason to print.
func chooseTier(asked, unavailable string) (tier, string, error) {
	switch tier(asked) {
	case tierKwok:
		return tierKwok, "simulated cluster only (kwok), as DEMO_TIER=kwok asks", nil
	case tierReal:
		if unavailable != "" {
			return "", "", fmt.Errorf("DEMO_TIER=real, but %s", unavailable)
		}
		return tierReal, "", nil
	case tierAuto, "":
		if unavailable != "" {
			return tierKwok, "simulated cluster only (kwok): " + unavailable, nil
		}
		return tierReal, "", nil
	default:
		return "", "", fmt.Errorf("DEMO_TIER=%q: want %q, %q or %q", asked, tierAuto, tierReal, tierKwok)
	}
}
