package webhook

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// podPatch is the answer that turns pod, as decoded from raw (doc: raw
// parsed), into mutated. Its JSON patch is the difference between the two
// as this operator encodes pods, so it touches only what the webhook
// changed: a field that the API server sends and this operator's API
// types do not know (a newer Kubernetes' field) is kept, where a
// difference with raw itself would remove it. injectedPatch makes it from
// the parts of the pod that the webhook changes; for a pod that differs
// elsewhere, wholePatch compares the whole pods. When appliesTo cannot
// tell that every operation of that patch applies to raw (a pod not
// encoded as the API server encodes pods), the patch is the difference
// with raw, and a debug log says so. unsetNamespace: the namespace of pod
// was set from the request, raw has none.
func podPatch(ctx context.Context, raw []byte, doc any, pod, mutated *corev1.Pod, unsetNamespace bool) admission.Response {
	if ops, ok := injectedPatch(pod, mutated, unsetNamespace); ok && appliesTo(doc, ops) {
		return patchResponse(ops)
	}
	return wholePatch(ctx, raw, doc, pod, mutated, unsetNamespace)
}

// wholePatch is podPatch's answer made from the whole pods, encoded.
func wholePatch(ctx context.Context, raw []byte, doc any, pod, mutated *corev1.Pod, unsetNamespace bool) admission.Response {
	after, err := json.Marshal(mutated)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	decoded := *pod
	if unsetNamespace {
		decoded.Namespace = ""
	}
	before, err := json.Marshal(&decoded)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if resp := admission.PatchResponseFromRaw(before, after); resp.Result == nil && appliesTo(doc, resp.Patches) {
		return resp
	}
	log.FromContext(ctx).V(1).Info("the pod's patch is made against the pod as sent, which it does not decode to: fields this operator does not know are removed")
	return admission.PatchResponseFromRaw(raw, after)
}

// appliesTo says whether JSON patch ops applies to doc, a JSON document
// parsed into Go values, as far as it can tell without applying it: every
// "add" goes into an object or array that doc has, within an array at most
// one past its end as earlier adds left it, and every "replace" or
// "remove" finds its member in doc, and in an array, among the elements
// that earlier removes left. No operation may reach below what an earlier
// one set or removed, nor below an element of an array whose elements an
// earlier one moved (an add before its end, a remove before its last
// element); adds at an array's end and removes of its last element move
// none, so its elements that doc has stay where they are. Anything else, a "move" or "copy" for one, is a no: a yes is
// never wrong.
func appliesTo(doc any, ops []jsonpatch.Operation) bool {
	// grown counts the elements that earlier adds put into each array of
	// doc, less those earlier removes took, by path; moved are the arrays whose elements earlier
	// operations moved; set are the paths earlier operations set or removed.
	grown, moved := map[string]int{}, map[string]bool{}
	set := make([]string, 0, len(ops))
	for _, op := range ops {
		tokens, ok := pointerTokens(op.Path)
		if !ok || len(tokens) == 0 {
			return false
		}
		parentPath := op.Path[:strings.LastIndex(op.Path, "/")]
		for _, p := range set {
			if strings.HasPrefix(op.Path, p+"/") {
				return false // below what an earlier operation set or removed
			}
		}
		for p := range moved {
			if strings.HasPrefix(op.Path, p+"/") && (op.Operation != "add" || parentPath != p) {
				return false // in an array whose elements moved
			}
		}
		parent, ok := resolve(doc, tokens[:len(tokens)-1])
		if !ok {
			return false
		}
		last := tokens[len(tokens)-1]
		switch op.Operation {
		case "add":
			switch p := parent.(type) {
			case map[string]any:
			case []any:
				n := len(p) + grown[parentPath]
				i := n
				if last != "-" {
					var err error
					if i, err = strconv.Atoi(last); err != nil || i < 0 || i > n || last != strconv.Itoa(i) {
						return false
					}
				}
				if i < n {
					moved[parentPath] = true
				}
				grown[parentPath]++
			default:
				return false
			}
		case "replace", "remove":
			if _, ok := resolve(parent, tokens[len(tokens)-1:]); !ok {
				return false
			}
			if p, ok := parent.([]any); ok {
				n := len(p) + grown[parentPath]
				i, _ := strconv.Atoi(last) // resolve read it
				if i >= n {
					return false // an element earlier removes took
				}
				if op.Operation == "remove" {
					if i < n-1 {
						moved[parentPath] = true
					}
					grown[parentPath]--
				}
			}
		default:
			return false
		}
		set = append(set, op.Path)
	}
	return true
}

// pointerTokens are the reference tokens of JSON pointer p (RFC 6901),
// unescaped; false when p is not a pointer.
func pointerTokens(p string) ([]string, bool) {
	if p == "" {
		return nil, true
	}
	if !strings.HasPrefix(p, "/") {
		return nil, false
	}
	tokens := strings.Split(p[1:], "/")
	for i, t := range tokens {
		if strings.Contains(t, "~") {
			tokens[i] = pointerUnescaper.Replace(t)
		}
	}
	return tokens, true
}

// pointerUnescaper undoes the escapes of a JSON pointer's reference token.
var pointerUnescaper = strings.NewReplacer("~1", "/", "~0", "~")

// resolve is the value that tokens reach from doc, and whether they reach
// one.
func resolve(doc any, tokens []string) (any, bool) {
	v := doc
	for _, t := range tokens {
		switch n := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = n[t]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(n) || t != strconv.Itoa(i) {
				return nil, false
			}
			v = n[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// patchResponse allows a pod with JSON patch ops.
func patchResponse(ops []jsonpatch.Operation) admission.Response {
	resp := admission.Response{Patches: ops, AdmissionResponse: admissionv1.AdmissionResponse{Allowed: true}}
	if len(ops) > 0 {
		pt := admissionv1.PatchTypeJSONPatch
		resp.PatchType = &pt
	}
	return resp
}

// injectedPatch is the JSON patch that turns pod into mutated, as the
// difference of their encodings would make it, made from the parts of a
// pod that InjectPod and PreferNode change only: its labels, annotations,
// volumes, containers, init containers and affinity. Encoding and parsing
// two whole pods costs an admission most of its time. Within a list, an
// element that changed is compared as encoded, and those appended are
// added whole. unsetNamespace: pod's namespace is not encoded, and the
// patch sets it. false when the pods differ elsewhere, or a list lost
// elements: the whole pods are compared then.
func injectedPatch(pod, mutated *corev1.Pod, unsetNamespace bool) ([]jsonpatch.Operation, bool) {
	rest := *mutated
	rest.Labels, rest.Annotations, rest.Spec.Affinity = pod.Labels, pod.Annotations, pod.Spec.Affinity
	rest.Spec.Volumes, rest.Spec.Containers, rest.Spec.InitContainers = pod.Spec.Volumes, pod.Spec.Containers, pod.Spec.InitContainers
	if !reflect.DeepEqual(&rest, pod) {
		return nil, false
	}
	var ops []jsonpatch.Operation
	if unsetNamespace && mutated.Namespace != "" {
		ops = append(ops, jsonpatch.NewOperation("add", "/metadata/namespace", mutated.Namespace))
	}
	ops = mapPatch(ops, "/metadata/labels", pod.Labels, mutated.Labels)
	ops = mapPatch(ops, "/metadata/annotations", pod.Annotations, mutated.Annotations)
	ops, ok := listPatch(ops, "/spec/volumes", pod.Spec.Volumes, mutated.Spec.Volumes, encodedPatch)
	if !ok {
		return nil, false
	}
	if ops, ok = listPatch(ops, "/spec/initContainers", pod.Spec.InitContainers, mutated.Spec.InitContainers, containerPatch); !ok {
		return nil, false
	}
	if ops, ok = listPatch(ops, "/spec/containers", pod.Spec.Containers, mutated.Spec.Containers, containerPatch); !ok {
		return nil, false
	}
	if pod.Spec.Affinity == nil && mutated.Spec.Affinity != nil {
		return append(ops, jsonpatch.NewOperation("add", "/spec/affinity", mutated.Spec.Affinity)), true
	}
	return encodedPatch(ops, "/spec/affinity", pod.Spec.Affinity, mutated.Spec.Affinity)
}

// containerPatch appends to ops what turns container before, at JSON
// pointer path, into after: the changes of its environment and volume
// mounts (injectContainer's), else the difference of their encodings.
func containerPatch(ops []jsonpatch.Operation, path string, before, after *corev1.Container) ([]jsonpatch.Operation, bool) {
	rest := *after
	rest.Env, rest.VolumeMounts = before.Env, before.VolumeMounts
	if !reflect.DeepEqual(&rest, before) {
		return encodedPatch(ops, path, before, after)
	}
	withEnv, ok := listPatch(ops, path+"/env", before.Env, after.Env, encodedPatch)
	if !ok {
		return encodedPatch(ops, path, before, after)
	}
	withMounts, ok := listPatch(withEnv, path+"/volumeMounts", before.VolumeMounts, after.VolumeMounts, encodedPatch)
	if !ok {
		return encodedPatch(ops, path, before, after)
	}
	return withMounts, true
}

// mapPatch appends to ops what turns map before, at JSON pointer path,
// into after: the whole map when before is empty (and so not encoded),
// else each key added, changed or removed.
func mapPatch(ops []jsonpatch.Operation, path string, before, after map[string]string) []jsonpatch.Operation {
	switch {
	case len(before) == 0 && len(after) == 0:
		return ops
	case len(before) == 0:
		return append(ops, jsonpatch.NewOperation("add", path, after))
	case len(after) == 0:
		return append(ops, jsonpatch.NewOperation("remove", path, nil))
	}
	for _, k := range slices.Sorted(maps.Keys(after)) {
		if v, ok := before[k]; !ok {
			ops = append(ops, jsonpatch.NewOperation("add", path+"/"+pointerEscaper.Replace(k), after[k]))
		} else if v != after[k] {
			ops = append(ops, jsonpatch.NewOperation("replace", path+"/"+pointerEscaper.Replace(k), after[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(before)) {
		if _, ok := after[k]; !ok {
			ops = append(ops, jsonpatch.NewOperation("remove", path+"/"+pointerEscaper.Replace(k), nil))
		}
	}
	return ops
}

// listPatch appends to ops what turns list before, at JSON pointer path,
// into after, which keeps before's elements in place and may append
// others: the whole list when before is empty, else what elem makes of
// each element that changed, and each appended one. false when after is
// shorter.
func listPatch[T any](ops []jsonpatch.Operation, path string, before, after []T, elem func([]jsonpatch.Operation, string, *T, *T) ([]jsonpatch.Operation, bool)) ([]jsonpatch.Operation, bool) {
	switch {
	case len(after) < len(before):
		return nil, false
	case len(before) == 0:
		if len(after) > 0 {
			ops = append(ops, jsonpatch.NewOperation("add", path, after))
		}
		return ops, true
	}
	for i := range before {
		if reflect.DeepEqual(&before[i], &after[i]) {
			continue
		}
		var ok bool
		if ops, ok = elem(ops, path+"/"+strconv.Itoa(i), &before[i], &after[i]); !ok {
			return nil, false
		}
	}
	for i := len(before); i < len(after); i++ {
		ops = append(ops, jsonpatch.NewOperation("add", path+"/"+strconv.Itoa(i), after[i]))
	}
	return ops, true
}

// encodedPatch appends to ops what turns before, at JSON pointer path,
// into after: nothing when they are equal, else the difference of their
// encodings.
func encodedPatch[T any](ops []jsonpatch.Operation, path string, before, after *T) ([]jsonpatch.Operation, bool) {
	if reflect.DeepEqual(before, after) {
		return ops, true
	}
	b, err := json.Marshal(before)
	if err != nil {
		return nil, false
	}
	a, err := json.Marshal(after)
	if err != nil {
		return nil, false
	}
	diff, err := jsonpatch.CreatePatch(b, a)
	if err != nil {
		return nil, false
	}
	for _, op := range diff {
		op.Path = path + op.Path
		ops = append(ops, op)
	}
	return ops, true
}

// pointerEscaper escapes a key as a JSON pointer's reference token.
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")
