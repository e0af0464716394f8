package claim

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// Execute carries out write w with c, under its precondition. On success
// w.Object holds what the API server returned. A Skip writes nothing.
func Execute(ctx context.Context, c client.Writer, w Write) error {
	var err error
	switch w.Op {
	case OpSkip:
		return nil
	case OpCreate:
		err = c.Create(ctx, w.Object)
	case OpUpdate:
		// The object carries the resourceVersion read: a newer write wins.
		err = c.Update(ctx, w.Object)
	case OpPatch:
		patch := client.MergeFrom(w.From)
		if w.Precondition.ResourceVersion != "" {
			patch = client.MergeFromWithOptions(w.From, client.MergeFromWithOptimisticLock{})
		}
		err = c.Patch(ctx, w.Object, patch)
	case OpGuardedPatch:
		// When the claim has not changed since it was read, an update
		// conditioned on the version read writes the same claim as the
		// patch, and costs the API server less. Once the claim changed, or
		// the update fails for another reason (a field of the claim this
		// client's types do not know, say), the patch tests what the write
		// was decided on; a claim that is gone needs no patch.
		if v := w.From.ResourceVersion; v != "" && w.Object.ResourceVersion == v {
			if err = c.Update(ctx, w.Object); err == nil || apierrors.IsNotFound(err) {
				break
			}
			w.Object.ResourceVersion = v
		}
		var raw []byte
		if raw, err = guardedPatch(w); err == nil {
			err = c.Patch(ctx, w.Object, client.RawPatch(types.JSONPatchType, raw))
		}
	case OpDelete:
		pre := client.Preconditions{UID: &w.Precondition.UID, ResourceVersion: &w.Precondition.ResourceVersion}
		err = c.Delete(ctx, w.Object, pre)
	default:
		return fmt.Errorf("unknown claim write %q", w.Op)
	}
	if err != nil {
		return fmt.Errorf("%s claim %s/%s: %w", verbs[w.Op], w.Object.Namespace, w.Object.Name, err)
	}
	return nil
}

var verbs = map[Op]string{OpCreate: "creating", OpUpdate: "updating", OpPatch: "patching", OpGuardedPatch: "writing", OpDelete: "deleting"}

// guardedPatch is the JSON patch of GuardedPatch w: tests of the claim's
// UID, its claim-role label as read, its checkout token and each
// annotation it writes that the object as read has, at its value as read
// (so that of two writers that read one record, the second fails), then
// an add of each annotation (which replaces one present). The object as
// read has annotations, the token among them.
func guardedPatch(w Write) ([]byte, error) {
	role := w.From.Labels[v1alpha1.ClaimRoleLabelKey]
	if w.Precondition.UID == "" || w.Precondition.CheckoutID == "" || role == "" {
		return nil, fmt.Errorf("a guarded patch of claim %s needs its UID, role and checkout token", w.From.Name)
	}
	ops := []map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": w.Precondition.UID},
		{"op": "test", "path": "/metadata/labels/" + pointerEscape(v1alpha1.ClaimRoleLabelKey), "value": role},
		{"op": "test", "path": "/metadata/annotations/" + pointerEscape(v1alpha1.CheckoutIDAnnotationKey), "value": w.Precondition.CheckoutID},
	}
	keys := make([]string, 0, len(w.Annotations))
	for k := range w.Annotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if v, ok := w.From.Annotations[k]; ok {
			ops = append(ops, map[string]any{"op": "test", "path": "/metadata/annotations/" + pointerEscape(k), "value": v})
		}
	}
	for _, k := range keys {
		ops = append(ops, map[string]any{"op": "add", "path": "/metadata/annotations/" + pointerEscape(k), "value": w.Annotations[k]})
	}
	return json.Marshal(ops)
}

// pointerEscape escapes key for a JSON pointer (RFC 6901).
func pointerEscape(key string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(key)
}
