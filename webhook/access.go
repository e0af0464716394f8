package webhook

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// UseVerb is the verb a pod's creator needs on a FluentPVC whose
// usePermission is Required.
const UseVerb = "use"

// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// namespaceMeta is a Namespace as the cache keeps it: metadata only.
func namespaceMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return m
}

// accessDenied says why the pod's namespace or creator may not use fpvc
// ("" when they may), with the metric's reason: the namespaceSelector
// (namespace labels from the cache), then, when usePermission is Required,
// a SubjectAccessReview of the requesting user for the verb "use".
func (m *PodMutator) accessDenied(ctx context.Context, fpvc *v1alpha1.FluentPVC, namespace string, user admission.Request) (string, string, error) {
	if sel := fpvc.Spec.NamespaceSelector; sel != nil && (len(sel.MatchLabels) > 0 || len(sel.MatchExpressions) > 0) {
		ns := namespaceMeta()
		if err := m.Reader.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil && !apierrors.IsNotFound(err) {
			return "", "", fmt.Errorf("reading namespace %s: %w", namespace, err)
		}
		ok, err := objects.NamespaceSelected(sel, ns.Labels)
		if err != nil {
			return fmt.Sprintf("FluentPVC %q has a namespaceSelector that selects nothing: %v", fpvc.Name, err), reasonNamespaceNotSelected, nil
		}
		if !ok {
			return fmt.Sprintf("FluentPVC %q admits pods only in namespaces selected by %s, and namespace %s is not: label the namespace, or use another FluentPVC",
				fpvc.Name, metav1.FormatLabelSelector(sel), namespace), reasonNamespaceNotSelected, nil
		}
	}
	if fpvc.Spec.UsePermission != v1alpha1.UsePermissionRequired {
		return "", "", nil
	}
	u := user.UserInfo
	extra := make(map[string]authorizationv1.ExtraValue, len(u.Extra))
	for k, v := range u.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			// In the pod's namespace, so that a RoleBinding there grants it
			// as well as a ClusterRoleBinding.
			Namespace: namespace,
			Group:     v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Resource: "fluentpvcs", Name: fpvc.Name, Verb: UseVerb,
		},
	}}
	if err := m.Writer.Create(ctx, sar); err != nil {
		return "", "", fmt.Errorf("checking whether %s may use FluentPVC %q: %w", u.Username, fpvc.Name, err)
	}
	if !sar.Status.Allowed {
		return fmt.Sprintf("FluentPVC %q requires permission to use it, and %s (who creates this pod) may not: grant the verb %q on fluentpvcs.%s named %s, or use another FluentPVC",
			fpvc.Name, u.Username, UseVerb, v1alpha1.GroupVersion.Group, fpvc.Name), reasonUseForbidden, nil
	}
	return "", "", nil
}
