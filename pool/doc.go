// Package pool is the warm pool: PVCs made from a FluentPVC's template and
// bound ahead of time in each pool namespace, so that a pod's claim is one
// conditional write away instead of a disk provisioning.
//
// The decisions (which warm PVC a pod may take, how many to create or
// delete, which are stale) are pure functions over plain values, tested with
// tables; the package imports no API client. Package checkout carries
// them out at a pod's admission (the checkout and the stock of reserved
// claims); the pool controller in package controllers applies Plan.
package pool
