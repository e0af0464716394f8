// Command crdtrim removes field descriptions inside embedded Kubernetes core
// types (a Job spec, a Container, volumes, ...) from generated CRDs, keeping
// the descriptions of the operator's own fields.
//
// Without it the FluentPVC CRD is close to 1 MB, far over the 256 KiB that a
// client-side `kubectl apply` can keep in its last-applied annotation. The
// core types stay documented by `kubectl explain pod.spec`.
//
// Usage: crdtrim FILE PATH...
// where each PATH is a dotted property path below a version's
// openAPIV3Schema, e.g. spec.sidecarContainerTemplate.
package main

import (
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: crdtrim FILE PATH...")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "crdtrim:", err)
		os.Exit(1)
	}
}

func run(file string, paths []string) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var crd map[string]any
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	spec, _ := crd["spec"].(map[string]any)
	versions, _ := spec["versions"].([]any)
	for _, v := range versions {
		schema, ok := dig(v, "schema", "openAPIV3Schema")
		if !ok {
			continue
		}
		for _, p := range paths {
			keys := []string{}
			for _, name := range strings.Split(p, ".") {
				keys = append(keys, "properties", name)
			}
			node, ok := dig(schema, keys...)
			if !ok {
				return fmt.Errorf("%s: no property %q", file, p)
			}
			stripBelow(node)
		}
	}
	out, err := yaml.Marshal(crd)
	if err != nil {
		return err
	}
	return os.WriteFile(file, append([]byte("---\n"), out...), 0o644)
}

func dig(node any, keys ...string) (any, bool) {
	for _, k := range keys {
		m, ok := node.(map[string]any)
		if !ok {
			return nil, false
		}
		if node, ok = m[k]; !ok {
			return nil, false
		}
	}
	return node, true
}

// stripBelow removes every description nested in a schema node, but keeps
// the node's own.
func stripBelow(node any) {
	m, ok := node.(map[string]any)
	if !ok {
		return
	}
	if props, ok := m["properties"].(map[string]any); ok {
		for _, p := range props {
			strip(p)
		}
	}
	for _, k := range []string{"items", "additionalProperties"} {
		if child, ok := m[k]; ok {
			strip(child)
		}
	}
}

func strip(node any) {
	if m, ok := node.(map[string]any); ok {
		delete(m, "description")
	}
	stripBelow(node)
}
