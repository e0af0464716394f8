package pool

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// ZoneLabelKey is the well-known node label of a zone.
const ZoneLabelKey = corev1.LabelTopologyZone

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

func splitZones(v string) []string {
	return strings.Split(v, ",")
}
