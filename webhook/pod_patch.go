package webhook

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// podPatch is the answer that turns pod, as decoded from raw (doc: raw
// parsed), into mutated. Its JSON patch is the difference between the two
// as this operator encodes pods, so it touches only what the webhook
// changed: a field that the API server sends and this operator's API types
// do not know (a newer Kubernetes' field) is kept, where a difference with
// raw itself would remove it. When an operation of that patch would not
// apply to raw (a pod not encoded as the API server encodes pods), the
// patch is the difference with raw. unsetNamespace: the namespace of pod
// was set from the request, raw has none.
func podPatch(raw []byte, doc any, pod, mutated *corev1.Pod, unsetNamespace bool) admission.Response {
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
	return admission.PatchResponseFromRaw(raw, after)
}

// appliesTo says whether JSON patch ops applies to doc, a JSON document
// parsed into Go values, as far as it can tell without applying it: every
// "add" goes into an object or array that doc has, within an array at most
// one past its end as earlier adds left it, and every "replace" or
// "remove" finds its member in doc, in no array that an earlier operation
// changed. Anything else, a "move" or "copy" for one, is a no: a yes is
// never wrong.
func appliesTo(doc any, ops []jsonpatch.Operation) bool {
	// grown counts the elements earlier adds put into each array of doc,
	// by path; shrunk are the arrays that earlier removes took one from.
	grown, shrunk := map[string]int{}, map[string]bool{}
	for _, op := range ops {
		tokens, ok := pointerTokens(op.Path)
		if !ok || len(tokens) == 0 {
			return false
		}
		for path := range grown {
			if strings.HasPrefix(op.Path, path+"/") && (op.Operation != "add" || len(tokens) != strings.Count(path, "/")+1) {
				return false // below an element of an array that grew
			}
		}
		for path := range shrunk {
			if strings.HasPrefix(op.Path, path+"/") {
				return false // in an array that shrank
			}
		}
		parentPath := op.Path[:strings.LastIndex(op.Path, "/")]
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
				if last != "-" {
					i, err := strconv.Atoi(last)
					if err != nil || i < 0 || i > len(p)+grown[parentPath] || last != strconv.Itoa(i) {
						return false
					}
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
				shrunk[parentPath] = true
			}
		default:
			return false
		}
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
