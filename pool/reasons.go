package pool

// Why warm PVCs are replaced, the "reason" label of
// fluentpvc_pool_replaced_total.
const (
	// ReplacedUnreachable: no node accepts the volume any more.
	ReplacedUnreachable = "unreachable"
	// ReplacedDemand: it served no node where pods run while one waited.
	ReplacedDemand = "demand"
	// ReplacedStranded: its volume stays attached to a node that is gone.
	ReplacedStranded = "stranded"
)

// HolderUnstaged is why the pool removes a holder (the "reason" label of
// fluentpvc_pool_holders_removed_total, with the others of HolderFate):
// its node can no longer take it, or staging is off.
const HolderUnstaged = "unstaged"
