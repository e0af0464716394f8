package webhook

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// podPatch is the answer that turns pod, as decoded from raw (doc: raw
// parsed), into mutated. Its JSON patch is the difference between the two
// as this operator encodes pods, so it touches only what the webhook
// changed: a field that the API server sends and this operator's API types
// do not know (a newer Kubernetes' field) is kept, where a difference with
// raw itself would remove it. When appliesTo cannot tell that every
// operation of that patch applies to raw (a pod not encoded as the API
// server encodes pods), the patch is the difference with raw, and a debug
// log says so. unsetNamespace: the namespace of pod was set from the
// request, raw has none.
func podPatch(ctx context.Context, raw []byte, doc any, pod, mutated *corev1.Pod, unsetNamespace bool) admission.Response {
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
// "remove" finds its member in doc. No operation may reach below what an
// earlier one set or removed, nor below an element of an array whose
// elements an earlier one moved (an add before its end, a remove); adds
// at an array's end move none, so its elements that doc has stay where
// they are. Anything else, a "move" or "copy" for one, is a no: a yes is
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
			if _, ok := parent.([]any); ok && op.Operation == "remove" {
				moved[parentPath] = true
				grown[parentPath]--
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
