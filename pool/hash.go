package pool

import (
	"encoding/json"
	"hash/fnv"
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// TemplateHash is a short, stable hash of a pvcSpecTemplate. Pool PVCs carry
// it, so that those made from an older template are recognised as stale.
func TemplateHash(spec *corev1.PersistentVolumeClaimSpec) string {
	raw, err := json.Marshal(spec)
	if err != nil {
		panic(err) // a PVC spec always marshals
	}
	h := fnv.New64a()
	h.Write(raw)
	return strconv.FormatUint(h.Sum64(), 36)
}
