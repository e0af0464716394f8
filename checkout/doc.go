// Package checkout is the runtime of a pod's admission: the checkout of a
// warm PVC (Checkouter) and the stock of claims reserved ahead of their
// pods (Stock), reading through the manager's cache and writing through
// claim.Execute. The pure decisions (which warm PVCs a pod may take, in
// what order, how many a stock holds) stay in package pool.
package checkout
