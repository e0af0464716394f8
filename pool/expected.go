package pool

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Expected is a warm PVC created and not seen in the cache yet.
type Expected struct {
	Key types.NamespacedName
	// Zone and Node are the node named for it and its zone ("" if none).
	Zone, Node string
	// At is when it was created.
	At time.Time
}
