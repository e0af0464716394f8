package checkout

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/pool"
)

// Stages says whether f's pool stages its warm PVCs (pool.StagingOn), from
// the template's StorageClass and its CSIDriver as r reads them.
func Stages(ctx context.Context, r client.Reader, f *v1alpha1.FluentPVC) (bool, error) {
	if f.Spec.Pool.Staging == v1alpha1.PoolStagingDisabled {
		return false, nil
	}
	sc, err := StorageClassOf(ctx, r, f.Spec.PVCSpecTemplate.StorageClassName)
	if err != nil {
		return false, err
	}
	_, staged, err := StagingOf(ctx, r, f, sc)
	return staged, err
}

// StagingOf says whether f's pool, whose template's StorageClass is sc
// (nil when none), stages its warm PVCs (pool.StagingOn), with the class's
// CSIDriver as r reads it (nil when there is none).
func StagingOf(ctx context.Context, r client.Reader, f *v1alpha1.FluentPVC, sc *storagev1.StorageClass) (*storagev1.CSIDriver, bool, error) {
	var driver *storagev1.CSIDriver
	if sc != nil {
		driver = &storagev1.CSIDriver{}
		if err := r.Get(ctx, client.ObjectKey{Name: sc.Provisioner}, driver); err != nil {
			if !apierrors.IsNotFound(err) {
				return nil, false, fmt.Errorf("reading CSIDriver %s: %w", sc.Provisioner, err)
			}
			driver = nil
		}
	}
	block := ptr.Deref(f.Spec.PVCSpecTemplate.VolumeMode, corev1.PersistentVolumeFilesystem) == corev1.PersistentVolumeBlock
	return driver, pool.StagingOn(f.Spec.Pool.Staging, sc, driver, block), nil
}

// StorageClassOf is the StorageClass name, or the default class when name
// is nil; nil when there is none (or name is "", static binding, or the
// class does not exist).
func StorageClassOf(ctx context.Context, r client.Reader, name *string) (*storagev1.StorageClass, error) {
	if name != nil {
		if *name == "" {
			return nil, nil
		}
		sc := &storagev1.StorageClass{}
		if err := r.Get(ctx, client.ObjectKey{Name: *name}, sc); err != nil {
			return nil, client.IgnoreNotFound(err)
		}
		return sc, nil
	}
	var l storagev1.StorageClassList
	if err := r.List(ctx, &l); err != nil {
		return nil, fmt.Errorf("listing StorageClasses: %w", err)
	}
	var sc *storagev1.StorageClass
	for i := range l.Items {
		if l.Items[i].Annotations["storageclass.kubernetes.io/is-default-class"] == "true" {
			sc = &l.Items[i]
		}
	}
	return sc, nil
}
