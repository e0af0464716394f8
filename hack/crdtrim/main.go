// Command crdtrim post-processes a generated CRD where markers cannot reach
// inside embedded Kubernetes core types (a Job spec, a Container, volumes):
//
//   - PATH removes every field description below PATH, keeping PATH's own.
//     Without it the FluentPVC CRD is close to 1 MB, far over the 256 KiB
//     that a client-side `kubectl apply` keeps in its last-applied
//     annotation. The core types stay documented by `kubectl explain pod`.
//   - PATH=N sets maxLength N on the string at PATH. CEL rules on strings of
//     embedded types (a volume's name) are only within the API server's cost
//     budget when those strings are bounded.
//
// Usage: crdtrim FILE ARG...
// A PATH is a dotted property path below a version's openAPIV3Schema, where
// "[]" steps into a list's items: spec.commonVolumes[].name.
package main

import (
	"fmt"
	"os"
	"strconv"
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
		for _, arg := range paths {
			p, maxLen, bound := strings.Cut(arg, "=")
			keys := []string{}
			for _, name := range strings.Split(p, ".") {
				name, list := strings.CutSuffix(name, "[]")
				keys = append(keys, "properties", name)
				if list {
					keys = append(keys, "items")
				}
			}
			node, ok := dig(schema, keys...)
			if !ok {
				return fmt.Errorf("%s: no property %q", file, p)
			}
			if !bound {
				stripBelow(node)
				continue
			}
			n, err := strconv.Atoi(maxLen)
			if err != nil {
				return fmt.Errorf("%s: bad maxLength in %q: %w", file, arg, err)
			}
			node.(map[string]any)["maxLength"] = n
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
