package claim

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
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

var verbs = map[Op]string{OpCreate: "creating", OpUpdate: "updating", OpPatch: "patching", OpDelete: "deleting"}
