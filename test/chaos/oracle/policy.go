package oracle

import _ "embed"

// Policy is the audit.k8s.io/v1 Policy the suite must give kube-apiserver
// (--audit-policy-file, with --audit-log-format=json, the default) so that
// the log holds what Check reads: the response of every write to pods
// (status and binding included), PVCs, Jobs (status included) and
// FluentPVCBindings, namespace creates and deletes, the writes of the
// operator's leader-election Lease, and the request of every Event create. Nothing else is logged, reads included, and the
// RequestReceived stage is omitted.
//
//go:embed policy.yaml
var Policy []byte
