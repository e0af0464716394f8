package controllers

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// quietConflicts wraps r so that a reconcile that lost an optimistic-lock
// race (another writer changed an object since it was read) runs again
// when the newer object's event comes (unwatchedRecheck at the latest)
// instead of failing. Such races are the normal course of several writers
// (the webhook, the kubelet, the Job controller, this operator's other
// controllers); an error log, which teams alert on, stays for what a person
// must look at.
func quietConflicts(r reconcile.Reconciler) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		res, err := r.Reconcile(ctx, req)
		if err == nil || !onlyConflicts(err) {
			return res, err
		}
		ctrl.LoggerFrom(ctx).V(1).Info("an object changed since it was read; reconciling again", "conflict", err.Error())
		return reconcile.Result{RequeueAfter: unwatchedRecheck}, nil
	})
}

// onlyConflicts is true when err is a conflict, and every error it wraps
// or joins is one too.
func onlyConflicts(err error) bool {
	if _, ok := err.(apierrors.APIStatus); ok {
		return apierrors.IsConflict(err)
	}
	switch e := err.(type) {
	case interface{ Unwrap() []error }:
		errs := e.Unwrap()
		for _, err := range errs {
			if !onlyConflicts(err) {
				return false
			}
		}
		return len(errs) > 0
	case interface{ Unwrap() error }:
		return onlyConflicts(e.Unwrap())
	}
	return false
}
