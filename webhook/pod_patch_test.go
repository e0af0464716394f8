package webhook

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	evanphx "github.com/evanphx/json-patch/v5"
	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/st-tech/fluent-pvc-operator/apis/objects"
	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/test/fixtures"
)

func TestAppliesTo(t *testing.T) {
	const doc = `{"metadata":{"labels":{"a/b":"1","t~1":"2"}},"spec":{"containers":[{"name":"app","args":["a","b","c"]}],"volumes":[]},"n":null}`
	add := func(path string) jsonpatch.Operation { return jsonpatch.NewOperation("add", path, "v") }
	op := func(kind, path string) jsonpatch.Operation { return jsonpatch.NewOperation(kind, path, "v") }
	cases := map[string]struct {
		ops  []jsonpatch.Operation
		want bool
	}{
		"nothing":                                         {want: true},
		"a new member":                                    {ops: []jsonpatch.Operation{add("/metadata/annotations")}, want: true},
		"a member there already":                          {ops: []jsonpatch.Operation{add("/metadata/labels/a~1b")}, want: true},
		"a member of a member added before":               {ops: []jsonpatch.Operation{add("/metadata/annotations"), add("/metadata/annotations/x")}},
		"a member of a member replaced before":            {ops: []jsonpatch.Operation{op("replace", "/metadata/labels"), add("/metadata/labels/x")}},
		"a member of a member removed before":             {ops: []jsonpatch.Operation{op("remove", "/metadata/labels"), add("/metadata/labels/x")}},
		"an escaped slash":                                {ops: []jsonpatch.Operation{op("replace", "/metadata/labels/a~1b")}, want: true},
		"an escaped tilde before a 1":                     {ops: []jsonpatch.Operation{op("replace", "/metadata/labels/t~01")}, want: true},
		"an escaped key that is not there":                {ops: []jsonpatch.Operation{op("replace", "/metadata/labels/a~0b")}},
		"into an object doc lacks":                        {ops: []jsonpatch.Operation{add("/status/phase")}},
		"into null":                                       {ops: []jsonpatch.Operation{add("/n/x")}},
		"replacing null":                                  {ops: []jsonpatch.Operation{op("replace", "/n")}, want: true},
		"appended, one after another":                     {ops: []jsonpatch.Operation{add("/spec/containers/1"), add("/spec/containers/2"), add("/spec/volumes/0")}, want: true},
		"appended with -":                                 {ops: []jsonpatch.Operation{add("/spec/containers/-")}, want: true},
		"past the end":                                    {ops: []jsonpatch.Operation{add("/spec/containers/2")}},
		"an index with a leading zero":                    {ops: []jsonpatch.Operation{add("/spec/containers/01")}},
		"into an element there before an append":          {ops: []jsonpatch.Operation{add("/spec/containers/1"), add("/spec/containers/0/env")}, want: true},
		"into the element appended":                       {ops: []jsonpatch.Operation{add("/spec/containers/1"), add("/spec/containers/1/env")}},
		"into an element after an insert":                 {ops: []jsonpatch.Operation{add("/spec/containers/0"), add("/spec/containers/1/env")}},
		"replacing an element after an insert":            {ops: []jsonpatch.Operation{add("/spec/containers/0"), op("replace", "/spec/containers/1")}},
		"inserting after an insert":                       {ops: []jsonpatch.Operation{add("/spec/containers/0"), add("/spec/containers/0")}, want: true},
		"into an element":                                 {ops: []jsonpatch.Operation{add("/spec/containers/0/volumeMounts")}, want: true},
		"replacing what is there":                         {ops: []jsonpatch.Operation{op("replace", "/spec/containers/0/name")}, want: true},
		"removing what is not there":                      {ops: []jsonpatch.Operation{op("remove", "/spec/containers/1")}},
		"removing an element":                             {ops: []jsonpatch.Operation{op("remove", "/spec/containers/0")}, want: true},
		"into an array after a remove":                    {ops: []jsonpatch.Operation{op("remove", "/spec/containers/0"), add("/spec/containers/0")}, want: true},
		"past the end after a remove":                     {ops: []jsonpatch.Operation{op("remove", "/spec/containers/0"), add("/spec/containers/1")}},
		"into an element of an array after a remove":      {ops: []jsonpatch.Operation{op("remove", "/spec/containers/0"), add("/spec/containers/0/env")}},
		"removing the last element, then into one before": {ops: []jsonpatch.Operation{op("remove", "/spec/containers/0/args/2"), op("replace", "/spec/containers/0/args/0")}, want: true},
		"removing the last element twice":                 {ops: []jsonpatch.Operation{op("remove", "/spec/containers/0/args/2"), op("remove", "/spec/containers/0/args/1")}, want: true},
		"appending after removing the last element":       {ops: []jsonpatch.Operation{op("remove", "/spec/containers/0/args/2"), add("/spec/containers/0/args/2")}, want: true},
		"replacing the last element once removed":         {ops: []jsonpatch.Operation{op("remove", "/spec/containers/0/args/2"), op("replace", "/spec/containers/0/args/2")}},
		"removing the last element, then past the end":    {ops: []jsonpatch.Operation{op("remove", "/spec/containers/0/args/2"), add("/spec/containers/0/args/3")}},
		"the whole document":                              {ops: []jsonpatch.Operation{op("replace", "")}},
		"not a pointer":                                   {ops: []jsonpatch.Operation{add("spec")}},
		"a move":                                          {ops: []jsonpatch.Operation{{Operation: "move", Path: "/spec/x", Value: nil}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var d any
			if err := json.Unmarshal([]byte(doc), &d); err != nil {
				t.Fatal(err)
			}
			got := appliesTo(d, tc.ops)
			if got != tc.want {
				t.Errorf("appliesTo = %v, want %v", got, tc.want)
			}
			if !got {
				return
			}
			// A yes holds: the patch applies as the API server applies it.
			ops, err := json.Marshal(tc.ops)
			if err != nil {
				t.Fatal(err)
			}
			p, err := evanphx.DecodePatch(ops)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Apply([]byte(doc)); err != nil {
				t.Errorf("appliesTo = true, but the patch does not apply: %v", err)
			}
		})
	}
}

// TestInjectedPatch: the patch made from the parts of a pod that the
// webhook changes has the operations that the difference of the two
// encoded pods has, and turns the pod, encoded, into the mutated one; a
// change elsewhere, or a list that lost elements, falls back to the
// difference of the whole pods.
func TestInjectedPatch(t *testing.T) {
	f := fixtures.MakeFluentPVC("f").Mutate(func(f *v1alpha1.FluentPVC) {
		f.Spec.CommonEnvs = append(f.Spec.CommonEnvs, corev1.EnvVar{Name: "A", Value: "common"})
		f.Spec.CommonVolumes = append(f.Spec.CommonVolumes, corev1.Volume{Name: "common", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		f.Spec.CommonVolumeMounts = append(f.Spec.CommonVolumeMounts, corev1.VolumeMount{Name: "common", MountPath: "/common"})
	}).Obj()
	native := f.DeepCopy()
	native.Spec.SidecarMode = v1alpha1.SidecarModeNative
	inject := func(spec *v1alpha1.FluentPVCSpec, staged string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			objects.InjectPod(p, spec, "f-claim")
			if staged != "" {
				objects.PreferNode(p, staged)
			}
		}
	}
	plain := fixtures.MakePod("app", "ns").FluentPVC(f.Name).Obj()
	unlabelled := plain.DeepCopy()
	unlabelled.Labels = nil
	annotated := plain.DeepCopy()
	annotated.Annotations = map[string]string{"a~b/c": "1"}
	withEnv := fixtures.MakePod("app", "ns").FluentPVC(f.Name).Env("A", "own").Env("B", "1").Volume("data").Mount("data", "/data").Obj()
	envTwice := fixtures.MakePod("app", "ns").FluentPVC(f.Name).Env("A", "1").Env("B", "1").Env("A", "2").Obj()
	// Made one, its env gets shorter: the container is compared encoded.
	envThrice := fixtures.MakePod("app", "ns").FluentPVC(f.Name).Env("A", "1").Env("A", "2").Env("A", "3").Obj()
	withToken := plain.DeepCopy()
	withToken.Spec.Volumes = append(withToken.Spec.Volumes, corev1.Volume{Name: "kube-api-access-x1"})
	withInit := plain.DeepCopy()
	withInit.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox"}}
	withAffinity := fixtures.MakePod("app", "ns").FluentPVC(f.Name).NodeSelector("zone", "a").Obj()
	withAffinity.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{}}
	emptyAffinity := plain.DeepCopy()
	emptyAffinity.Spec.Affinity = &corev1.Affinity{}
	cases := map[string]struct {
		pod            *corev1.Pod
		mutate         func(*corev1.Pod)
		unsetNamespace bool
		fallback       bool
	}{
		"a plain pod":                      {pod: plain, mutate: inject(&f.Spec, "")},
		"no labels":                        {pod: unlabelled, mutate: inject(&f.Spec, "")},
		"annotations, keys to escape":      {pod: annotated, mutate: inject(&f.Spec, "")},
		"an env replaced, volumes, mounts": {pod: withEnv, mutate: inject(&f.Spec, "")},
		"the service account's token":      {pod: withToken, mutate: inject(&f.Spec, "")},
		"an env named twice, made one":     {pod: envTwice, mutate: inject(&f.Spec, "")},
		"an env shorter":                   {pod: envThrice, mutate: inject(&f.Spec, "")},
		"a container changed elsewhere": {pod: withEnv, mutate: func(p *corev1.Pod) {
			inject(&f.Spec, "")(p)
			p.Spec.Containers[0].Image = "other"
		}},
		"a native sidecar after an init":       {pod: withInit, mutate: inject(&native.Spec, "")},
		"a native sidecar, no init containers": {pod: plain, mutate: inject(&native.Spec, "")},
		"staged, no affinity":                  {pod: plain, mutate: inject(&f.Spec, "n1")},
		"staged, an empty affinity":            {pod: emptyAffinity, mutate: inject(&f.Spec, "n1")},
		"staged, an affinity of its own":       {pod: withAffinity, mutate: inject(&f.Spec, "n1")},
		"the namespace unset":                  {pod: plain, mutate: inject(&f.Spec, ""), unsetNamespace: true},
		"nothing changed":                      {pod: plain, mutate: func(*corev1.Pod) {}},
		"a change elsewhere": {pod: plain, fallback: true, mutate: func(p *corev1.Pod) {
			inject(&f.Spec, "")(p)
			p.Spec.PriorityClassName = "high"
		}},
		"a volume removed": {pod: withEnv, fallback: true, mutate: func(p *corev1.Pod) { p.Spec.Volumes = nil }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			mutated := tc.pod.DeepCopy()
			tc.mutate(mutated)
			ops, ok := injectedPatch(tc.pod, mutated, tc.unsetNamespace)
			if ok == tc.fallback {
				t.Fatalf("injectedPatch ok = %v, want %v", ok, !tc.fallback)
			}
			if !ok {
				return
			}
			decoded := tc.pod.DeepCopy()
			if tc.unsetNamespace {
				decoded.Namespace = ""
			}
			before, err := json.Marshal(decoded)
			if err != nil {
				t.Fatal(err)
			}
			after, err := json.Marshal(mutated)
			if err != nil {
				t.Fatal(err)
			}
			whole, err := jsonpatch.CreatePatch(before, after)
			if err != nil {
				t.Fatal(err)
			}
			var doc any
			if err := json.Unmarshal(before, &doc); err != nil {
				t.Fatal(err)
			}
			if !appliesTo(doc, ops) {
				t.Errorf("appliesTo = false for the patch of the pod as encoded: the webhook would patch against the pod as sent\n%s", strings.Join(encodedOps(t, ops), "\n"))
			}
			if got, want := encodedOps(t, ops), encodedOps(t, whole); !slices.Equal(got, want) {
				t.Errorf("operations:\n%s\nwant those of the whole pods:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			encoded, err := json.Marshal(ops)
			if err != nil {
				t.Fatal(err)
			}
			p, err := evanphx.DecodePatch(encoded)
			if err != nil {
				t.Fatal(err)
			}
			patched, err := p.Apply(before)
			if err != nil {
				t.Fatalf("the patch does not apply to the pod: %v", err)
			}
			if !evanphx.Equal(patched, after) {
				t.Errorf("the patched pod\n%s\nis not the mutated one\n%s", patched, after)
			}
		})
	}
}

// encodedOps are ops, each encoded, in order of path: a patch's
// operations on different paths apply in any order, and those that
// injectedPatch makes on one list come in the order of its elements.
func encodedOps(t *testing.T, ops []jsonpatch.Operation) []string {
	t.Helper()
	out := make([]string, 0, len(ops))
	for _, op := range ops {
		var v any
		b, err := json.Marshal(op.Value)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		canon, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, op.Operation+" "+op.Path+" "+string(canon))
	}
	slices.Sort(out)
	return out
}

// BenchmarkPodPatch: the patch of a pod of one container with an env, a
// volume and the service account's token, made from the parts that the
// webhook changes (podPatch) against the same made from the whole pods
// (wholePatch, podPatch's fallback).
func BenchmarkPodPatch(b *testing.B) {
	f := fixtures.MakeFluentPVC("f").Obj()
	pod := fixtures.MakePod("app", "ns").FluentPVC(f.Name).Env("A", "1").Volume("data").Mount("data", "/data").Obj()
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "kube-api-access-x1", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}},
	}}})
	raw, err := json.Marshal(pod)
	if err != nil {
		b.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		b.Fatal(err)
	}
	mutated := pod.DeepCopy()
	objects.InjectPod(mutated, &f.Spec, "f-claim")
	for name, patch := range map[string]func(context.Context, []byte, any, *corev1.Pod, *corev1.Pod, bool) admission.Response{
		"parts": podPatch, "whole pods": wholePatch,
	} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if resp := patch(context.Background(), raw, doc, pod, mutated, false); len(resp.Patches) == 0 {
					b.Fatal("no patch")
				}
			}
		})
	}
}
