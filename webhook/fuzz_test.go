package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/checkout"
	"github.com/st-tech/fluent-pvc-operator/claim"
	"github.com/st-tech/fluent-pvc-operator/pool"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
	"github.com/st-tech/fluent-pvc-operator/webhook"
)

// The cluster each fuzzed admission runs against, in namespace fuzzNS:
// FluentPVC "fpvc" (with one warm PVC in its pool when the input asks
// for it), FluentPVC "deleting", which is being deleted, node "node-a", and
// pod "running", which uses claim "fpvc-used" (the target of a copied
// manifest).
const (
	fuzzNS       = "ns"
	fuzzFPVC     = "fpvc"
	fuzzDeleting = "deleting"
	fuzzWarm     = "fpvc-warm"
	fuzzUsed     = "fpvc-used"
	fuzzZone     = "zone-a"
)

// FuzzPodAdmission sends arbitrary bytes as the pod of a create admission,
// as a dry run or not, with or without a warm PVC in the pool, to a webhook
// on a fake API server, and checks for every input that:
//
//  1. Handle does not panic;
//  2. the answer is an allowance (HTTP 200) or a 4xx denial, never a 5xx:
//     the fake API server is healthy, so only the input can be wrong, and bad
//     input is the client's error;
//  3. only an allowance with patches writes, and only when not a dry run:
//     exactly one claim, the one the patched pod names, handed out for
//     FluentPVC "fpvc" (no write on a dry run or on any other answer);
//  4. the patches apply to the pod sent and make it, decoded, the pod sent
//     with what InjectPod adds; admitting the patched pod again (a copy of
//     its manifest: the API server never reinvokes the webhook) refuses it
//     and writes nothing.
//
// The seed corpus is in testdata/fuzz/FuzzPodAdmission. While fuzzing, Go
// minimises each new interesting input for up to a minute, and reports no
// executions meanwhile; -fuzzminimizetime=10s shortens those pauses.
func FuzzPodAdmission(f *testing.F) {
	env := newFuzzEnv(f)
	// Pods as the API server sends them, built from the shared fixtures.
	for _, p := range []*corev1.Pod{
		fixtures.MakePod("app", fuzzNS).FluentPVC(fuzzFPVC).Env("A", "1").Volume("data").Mount("data", "/data").Obj(),
		fixtures.MakePod("", fuzzNS).GenerateName("app-").FluentPVC(fuzzFPVC).NodeSelector(pool.ZoneLabelKey, fuzzZone).Obj(),
	} {
		raw, err := json.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw, false, true)
	}
	f.Fuzz(func(t *testing.T, raw []byte, dryRun, warmPool bool) {
		_ = env.check(t, raw, dryRun, warmPool)
	})
}

// fuzzEnv holds what every fuzzed admission shares: building the scheme,
// its codecs and reading the sample FluentPVC take far longer than one
// admission.
type fuzzEnv struct {
	scheme  *runtime.Scheme
	codecs  serializer.CodecFactory
	decoder admission.Decoder
	fpvc    *v1alpha1.FluentPVC
	// indexes are the webhook's own cache indexes (warm PVCs, holders), as
	// checkout.IndexWarm defines them.
	indexes fieldIndexes
}

// fieldIndex is an index that checkout.IndexWarm adds to a cache, captured
// for the fake client's builder.
type fieldIndex struct {
	obj   client.Object
	field string
	fn    client.IndexerFunc
}

type fieldIndexes []fieldIndex

func (i *fieldIndexes) IndexField(_ context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	*i = append(*i, fieldIndex{obj: obj, field: field, fn: fn})
	return nil
}

func newFuzzEnv(f testing.TB) *fuzzEnv {
	f.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			f.Fatal(err)
		}
	}
	env := &fuzzEnv{
		scheme: scheme, codecs: serializer.NewCodecFactory(scheme), decoder: admission.NewDecoder(scheme),
		fpvc: fixtures.MakeFluentPVC(fuzzFPVC).Obj(),
	}
	if err := checkout.IndexWarm(context.Background(), &env.indexes); err != nil {
		f.Fatal(err)
	}
	return env
}

// fuzzCluster is one admission's fake API server: the webhook reads its
// cache and the live API, and writes, all through the same objects.
type fuzzCluster struct {
	live client.WithWatch
	// api is the live reader as the manager's API reader sees it: a request
	// naming an object by a name that cannot be a URL path segment fails in
	// client-go before it is sent, and the API server refuses a label
	// selector whose values are not label values. The fake client checks
	// neither; the webhook reads such names from the pod's labels, which
	// the API server validates only after mutating admission. Namespaces
	// are not checked: the API server admits a pod only in the namespace of
	// its URL.
	api client.Reader
}

func (e *fuzzEnv) cluster(t *testing.T, warmPool bool) *fuzzCluster {
	t.Helper()
	fpvc := e.fpvc.DeepCopy()
	fpvc.UID = "fpvc-uid"
	deleting := e.fpvc.DeepCopy()
	deleting.Name, deleting.UID = fuzzDeleting, "deleting-uid"
	deleting.DeletionTimestamp = &metav1.Time{Time: fixtures.Epoch}
	deleting.Finalizers = []string{v1alpha1.FluentPVCProtectionFinalizer}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{pool.ZoneLabelKey: fuzzZone}}}

	hash := pool.TemplateHash(&fpvc.Spec.PVCSpecTemplate)
	used := claim.NewClaimed(fpvc, fuzzNS, fuzzUsed, hash, v1alpha1.CheckoutMiss, claim.NewCheckoutID(), "", fixtures.Epoch).Object
	used.UID = "used-uid"
	usedBy := fixtures.MakePod("running", fuzzNS).FluentPVC(fuzzFPVC).Label(v1alpha1.BindingNameLabelKey, fuzzUsed).Obj()
	usedBy.UID = "running-uid"
	objects.InjectPod(usedBy, &fpvc.Spec, fuzzUsed)
	recorded, err := claim.RecordPod(used, v1alpha1.ObjectIdentity{Name: usedBy.Name, UID: usedBy.UID})
	if err != nil {
		t.Fatal(err)
	}
	used = recorded.Object
	binding := claim.Binding(used, fpvc.UID)
	binding.Spec.Pod = v1alpha1.ObjectIdentity{Name: usedBy.Name, UID: usedBy.UID}

	objs := []client.Object{deleting, node, used, usedBy, binding}
	if warmPool {
		fpvc.Spec.Pool.Size = 2
		warm := claim.NewWarm(fpvc, fuzzNS, hash, "").Object
		warm.Name, warm.UID = fuzzWarm, "warm-uid"
		warm.Annotations = map[string]string{v1alpha1.ZonesAnnotationKey: fuzzZone}
		warm.Status.Phase = corev1.ClaimBound
		objs = append(objs, warm)
	}
	objs = append(objs, fpvc)

	// A plain object tracker: the default one, which keeps managed fields
	// for server-side apply, builds a client-go scheme and a REST mapper
	// for every client, which would take most of each run.
	b := fake.NewClientBuilder().WithScheme(e.scheme).
		WithObjectTracker(clienttesting.NewObjectTracker(e.scheme, e.codecs.UniversalDecoder())).
		WithObjects(objs...)
	for _, i := range e.indexes {
		b = b.WithIndex(i.obj, i.field, i.fn)
	}
	live := b.Build()
	api := interceptor.NewClient(live, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if key.Name == "" {
				return fmt.Errorf("resource name may not be empty")
			}
			if msgs := content.IsPathSegmentName(key.Name); len(msgs) != 0 {
				return fmt.Errorf("invalid resource name %q: %v", key.Name, msgs)
			}
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			lo := (&client.ListOptions{}).ApplyOptions(opts)
			if lo.LabelSelector != nil {
				if _, err := labels.Parse(lo.LabelSelector.String()); err != nil {
					return apierrors.NewBadRequest(err.Error())
				}
			}
			return c.List(ctx, list, opts...)
		},
	})
	// checkout.Checkouter compares its readers with ==, which panics on the
	// interceptor's struct of funcs; a pointer compares.
	return &fuzzCluster{live: live, api: &struct{ client.Reader }{api}}
}

// check runs one fuzzed admission and a copy of its output, and returns the
// pod patched, nil when the admission did not mutate it.
func (e *fuzzEnv) check(t *testing.T, raw []byte, dryRun, warmPool bool) []byte {
	c := e.cluster(t, warmPool)
	m := webhook.NewPodMutator(c.live, c.api, c.live, e.decoder, clocktesting.NewFakePassiveClock(fixtures.Epoch))
	ctx := log.IntoContext(context.Background(), logr.Discard())

	before := claimVersions(t, c.live)
	resp := admit(t, ctx, m, raw, dryRun, "the pod")
	after := claimVersions(t, c.live)
	written := changed(before, after)
	mutated := resp.Allowed && len(resp.Patches) > 0
	if (!mutated || dryRun) && len(written) > 0 {
		t.Fatalf("admitting the pod (dry run %t) answered allowed=%t with %d patches (%s) and wrote claims %v; "+
			"only a mutation that is not a dry run may write", dryRun, resp.Allowed, len(resp.Patches), message(resp), written)
	}
	checkAnswer(t, resp, "the pod")
	if !mutated {
		return nil
	}

	patched, err := applyPatches(raw, resp)
	if err != nil {
		t.Fatalf("the webhook's patches do not apply to the pod it was sent: %v\npatches: %s", err, patchJSON(resp))
	}
	pod := &corev1.Pod{}
	if err := json.Unmarshal(patched, pod); err != nil {
		t.Fatalf("the patched pod is not a pod: %v\npatched: %s", err, patched)
	}
	claimName := pod.Labels[v1alpha1.BindingNameLabelKey]
	if claimName == "" {
		t.Fatalf("the patched pod has no label %s\npatched: %s", v1alpha1.BindingNameLabelKey, patched)
	}
	// The patch adds what InjectPod adds to the pod sent, and changes
	// nothing else of what the operator's API types know. A document that
	// repeats a member, which the API server never sends (it sends the pod
	// as it encodes it), decodes to a merge of the repeats, which its
	// patched copy need not be.
	sent, injected := &corev1.Pod{}, &corev1.Pod{}
	if err := e.decoder.DecodeRaw(runtime.RawExtension{Raw: raw}, sent); err != nil {
		t.Fatalf("decoding the pod sent: %v", err)
	}
	if err := e.decoder.DecodeRaw(runtime.RawExtension{Raw: patched}, injected); err != nil {
		t.Fatalf("decoding the patched pod: %v\npatched: %s", err, patched)
	}
	if sent.Namespace == "" {
		sent.Namespace = fuzzNS
	}
	objects.InjectPod(sent, &e.fpvc.Spec, claimName)
	if !repeatsMember(raw) && !equality.Semantic.DeepEqual(sent, injected) {
		want, _ := json.Marshal(sent)
		t.Fatalf("the patched pod is not the pod sent with the injection\npatched: %s\nwant: %s\npatches: %s", patched, want, patchJSON(resp))
	}
	if !dryRun {
		ns := pod.Namespace
		if ns == "" {
			ns = fuzzNS
		}
		if want := []string{ns + "/" + claimName}; fmt.Sprint(written) != fmt.Sprint(want) {
			t.Fatalf("admitting the pod wrote claims %v, want exactly %v, the claim the patched pod names", written, want)
		}
		got := &corev1.PersistentVolumeClaim{}
		if err := c.live.Get(ctx, client.ObjectKey{Namespace: ns, Name: claimName}, got); err != nil {
			t.Fatalf("reading the pod's claim %s/%s: %v", ns, claimName, err)
		}
		if !claim.Held(got) || got.Labels[v1alpha1.FluentPVCNameLabelKey] != fuzzFPVC {
			t.Fatalf("the pod's claim %s/%s is not a claim of FluentPVC %q handed out for a new pod: labels %v, finalizers %v",
				ns, claimName, fuzzFPVC, got.Labels, got.Finalizers)
		}
	}

	// The API server never reinvokes the webhook (reinvocationPolicy
	// Never): a pod sent with the webhook's output is a copy of an
	// admitted pod's manifest, refused without a write.
	again := admit(t, ctx, m, patched, dryRun, "the patched pod")
	checkAnswer(t, again, "the patched pod")
	if again.Allowed {
		t.Fatalf("admitting a copy of the webhook's own output (dry run %t) was allowed (%s), want refused\npatched pod: %s\npatches: %s",
			dryRun, message(again), patched, patchJSON(again))
	}
	if w := changed(after, claimVersions(t, c.live)); len(w) > 0 {
		t.Fatalf("admitting a copy of the webhook's own output wrote claims %v", w)
	}
	return patched
}

// TestAdmissionKeepsUnknownFields: fields of a pod that the operator's API
// types do not know, as a newer API server sends them, are in the pod as
// patched, on a hit and on a miss, with the sidecar a native one or
// appended to the containers: in its metadata, its spec, and the container
// that the webhook adds the claim's mount to.
func TestAdmissionKeepsUnknownFields(t *testing.T) {
	sent := fixtures.MakePod("app", fuzzNS).FluentPVC(fuzzFPVC).Volume("data").Mount("data", "/data").Obj()
	raw, err := json.Marshal(sent)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	unknown := []string{"/metadata/futureField", "/spec/futureField", "/spec/containers/0/futureField"}
	spec := doc["spec"].(map[string]any)
	doc["metadata"].(map[string]any)["futureField"] = "kept"
	spec["futureField"] = "kept"
	spec["containers"].([]any)[0].(map[string]any)["futureField"] = "kept"
	if raw, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []v1alpha1.SidecarMode{v1alpha1.SidecarModeNative, v1alpha1.SidecarModeContainer} {
		for name, warmPool := range map[string]bool{"hit": true, "miss": false} {
			t.Run(string(mode)+", "+name, func(t *testing.T) {
				env := newFuzzEnv(t)
				env.fpvc.Spec.SidecarMode = mode
				patched := env.check(t, raw, false, warmPool)
				if patched == nil {
					t.Fatal("the pod was not mutated")
				}
				var got any
				if err := json.Unmarshal(patched, &got); err != nil {
					t.Fatal(err)
				}
				for _, path := range unknown {
					tokens := strings.Split(path[1:], "/")
					v := got
					for _, tok := range tokens {
						switch n := v.(type) {
						case map[string]any:
							v = n[tok]
						case []any:
							if i, err := strconv.Atoi(tok); err == nil && i < len(n) {
								v = n[i]
							} else {
								v = nil
							}
						default:
							v = nil
						}
					}
					if v != "kept" {
						t.Errorf("%s of the patched pod is %v, want \"kept\" as sent\npatched: %s", path, v, patched)
					}
				}
			})
		}
	}
}

// admit sends raw as the pod of a create admission in fuzzNS, and fails t
// if the webhook panics.
func admit(t *testing.T, ctx context.Context, m *webhook.PodMutator, raw []byte, dryRun bool, what string) (resp admission.Response) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("admitting %s panicked: %v\n%s", what, r, debug.Stack())
		}
	}()
	return m.Handle(ctx, admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       "fuzz",
		Operation: admissionv1.Create,
		Namespace: fuzzNS,
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Object:    runtime.RawExtension{Raw: raw},
		DryRun:    ptr.To(dryRun),
	}})
}

// checkAnswer fails t unless resp allows (HTTP 200) or denies with a 4xx.
func checkAnswer(t *testing.T, resp admission.Response, what string) {
	t.Helper()
	code := statusCode(resp)
	switch {
	case resp.Allowed && code != http.StatusOK:
		t.Fatalf("admitting %s: allowed with %s", what, message(resp))
	case !resp.Allowed && (code < 400 || code >= 500):
		t.Fatalf("admitting %s: refused with %s; the fake API server is healthy, so only the input is to blame, which calls for a 4xx denial",
			what, message(resp))
	case !resp.Allowed && len(resp.Patches) > 0:
		t.Fatalf("admitting %s: denied (%s) with %d patches", what, message(resp), len(resp.Patches))
	}
}

// statusCode is resp's HTTP status; a patch response carries none, and
// means 200.
func statusCode(resp admission.Response) int32 {
	if resp.Result == nil {
		return http.StatusOK
	}
	return resp.Result.Code
}

func message(resp admission.Response) string {
	if resp.Result == nil {
		return fmt.Sprintf("HTTP %d, no message", statusCode(resp))
	}
	return fmt.Sprintf("HTTP %d %q", statusCode(resp), resp.Result.Message)
}

// applyPatches applies resp's JSON patch to raw, as the API server applies
// it to the object it sent.
func applyPatches(raw []byte, resp admission.Response) ([]byte, error) {
	p, err := jsonpatch.DecodePatch(patchJSON(resp))
	if err != nil {
		return nil, fmt.Errorf("decoding the patch: %w", err)
	}
	return p.Apply(raw)
}

func patchJSON(resp admission.Response) []byte {
	ops, err := json.Marshal(resp.Patches)
	if err != nil {
		return []byte(err.Error())
	}
	return ops
}

// claimVersions is every claim's resourceVersion by namespace/name.
func claimVersions(t *testing.T, c client.Reader) map[string]string {
	t.Helper()
	var l corev1.PersistentVolumeClaimList
	if err := c.List(context.Background(), &l); err != nil {
		t.Fatalf("listing claims: %v", err)
	}
	out := make(map[string]string, len(l.Items))
	for _, pvc := range l.Items {
		out[pvc.Namespace+"/"+pvc.Name] = pvc.ResourceVersion
	}
	return out
}

// changed lists the claims created, changed or deleted between before and
// after.
func changed(before, after map[string]string) []string {
	var out []string
	for k, v := range after {
		if before[k] != v {
			out = append(out, k)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// repeatsMember says whether JSON document raw has an object with a
// member named twice.
func repeatsMember(raw []byte) bool {
	d := json.NewDecoder(bytes.NewReader(raw))
	// names holds, for each object open, the names of its members seen;
	// arrays open hold nil. inObject tells a name from a value.
	var names []map[string]bool
	expectName := false
	for {
		tok, err := d.Token()
		if err != nil {
			return false
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				names = append(names, map[string]bool{})
				expectName = true
				continue
			case '[':
				names = append(names, nil)
			case '}', ']':
				names = names[:len(names)-1]
			}
		case string:
			if expectName {
				top := names[len(names)-1]
				if top[v] {
					return true
				}
				top[v] = true
				expectName = false
				continue
			}
		}
		// A value ended: the next token of an object is a name.
		expectName = len(names) > 0 && names[len(names)-1] != nil
	}
}
