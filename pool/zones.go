package pool

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// ZoneLabelKey is the well-known node label of a zone.
const ZoneLabelKey = corev1.LabelTopologyZone

// Zones is a set of zones a pod may run in; nil means any zone.
type Zones sets.Set[string]

// AllowedZones reads the zones a pod may run in from its nodeSelector and its
// required node affinity on topology.kubernetes.io/zone; nodeZone is the zone
// of spec.nodeName when the pod names a node ("" when it does not or the
// zone is unknown). It returns nil when the pod may run in any zone.
func AllowedZones(pod *corev1.Pod, nodeZone string) Zones {
	var allowed sets.Set[string]
	restrict := func(zones sets.Set[string]) {
		if allowed == nil {
			allowed = zones
		} else {
			allowed = allowed.Intersection(zones)
		}
	}
	if z, ok := pod.Spec.NodeSelector[ZoneLabelKey]; ok {
		restrict(sets.New(z))
	}
	if nodeZone != "" {
		restrict(sets.New(nodeZone))
	}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		// Terms are ORed; a term without a zone requirement allows any zone.
		var union sets.Set[string]
		anyZone := false
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			z, ok := termZones(term)
			if !ok {
				anyZone = true
				break
			}
			union = union.Union(z)
		}
		if !anyZone {
			restrict(union)
		}
	}
	if allowed == nil {
		return nil
	}
	return Zones(allowed)
}

// termZones is the zones a node selector term allows; ok is false when the
// term does not restrict zones.
func termZones(term corev1.NodeSelectorTerm) (sets.Set[string], bool) {
	var zones sets.Set[string]
	restricted := false
	for _, r := range term.MatchExpressions {
		if r.Key != ZoneLabelKey {
			continue
		}
		var z sets.Set[string]
		switch r.Operator {
		case corev1.NodeSelectorOpIn:
			z = sets.New(r.Values...)
		default:
			continue // NotIn, Exists...: too loose to pin a volume; ignore
		}
		if !restricted {
			zones, restricted = z, true
		} else {
			zones = zones.Intersection(z)
		}
	}
	return zones, restricted
}

// PVZones reads the zones a PV can be used in from its required node
// affinity; nil means any zone.
func PVZones(pv *corev1.PersistentVolume) []string {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return nil
	}
	var union sets.Set[string]
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		z, ok := termZones(term)
		if !ok {
			return nil
		}
		union = union.Union(z)
	}
	return sets.List(union)
}

// FormatZones is the ZonesAnnotationKey value of zones.
func FormatZones(zones []string) string {
	return strings.Join(zones, ",")
}

// Usable reports whether a volume usable in the zones annotated zonesValue
// (see FormatZones; empty means any) can serve a pod allowed in allowed.
func Usable(zonesValue string, allowed Zones) bool {
	if allowed == nil || zonesValue == "" {
		return true
	}
	return slices.ContainsFunc(strings.Split(zonesValue, ","), func(z string) bool {
		return sets.Set[string](allowed).Has(z)
	})
}
