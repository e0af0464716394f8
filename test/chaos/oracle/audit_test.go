package oracle

import (
	"cmp"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
)

// auditLines are lines as kube-apiserver's JSON log backend writes them:
// the webhook's create of a claim, the RequestReceived stage of a pod
// create (which the policy omits, but a log may hold), the controller
// manager's create of a ReplicaSet pod from generateName (objectRef.name
// empty), an Event create logged at level Request, a blank line, and a
// last line cut short.
var auditLines = []string{
	`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"0b3c1e9a-6f1d-4c8e-9a51-1f0b6f0c3a01","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/ns/persistentvolumeclaims","verb":"create","user":{"username":"system:serviceaccount:fluent-pvc-operator-system:controller-manager","groups":["system:serviceaccounts","system:authenticated"]},"sourceIPs":["127.0.0.1"],"userAgent":"manager/v0.0.0","objectRef":{"resource":"persistentvolumeclaims","namespace":"ns","name":"fpvc-8xk2mq7d4c","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":201},"requestObject":{"kind":"PersistentVolumeClaim","apiVersion":"v1","metadata":{"name":"fpvc-8xk2mq7d4c","namespace":"ns","labels":{"fluent-pvc-operator.tech.zozo.com/claim-role":"claimed","fluent-pvc-operator.tech.zozo.com/fluent-pvc-binding-name":"fpvc-8xk2mq7d4c","fluent-pvc-operator.tech.zozo.com/fluent-pvc-name":"fpvc"},"finalizers":["fluent-pvc-operator.tech.zozo.com/pvc-protection"]},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}},"status":{}},"responseObject":{"kind":"PersistentVolumeClaim","apiVersion":"v1","metadata":{"name":"fpvc-8xk2mq7d4c","namespace":"ns","uid":"5f1e2d3c-0000-4000-8000-000000000001","resourceVersion":"5120","creationTimestamp":"2026-11-23T10:00:00Z","labels":{"fluent-pvc-operator.tech.zozo.com/claim-role":"claimed","fluent-pvc-operator.tech.zozo.com/fluent-pvc-binding-name":"fpvc-8xk2mq7d4c","fluent-pvc-operator.tech.zozo.com/fluent-pvc-name":"fpvc"},"finalizers":["fluent-pvc-operator.tech.zozo.com/pvc-protection","kubernetes.io/pvc-protection"]},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}},"storageClassName":"standard","volumeMode":"Filesystem"},"status":{"phase":"Pending"}},"requestReceivedTimestamp":"2026-11-23T10:00:00.020000Z","stageTimestamp":"2026-11-23T10:00:00.040000Z","annotations":{"authorization.k8s.io/decision":"allow","authorization.k8s.io/reason":"RBAC"}}`,
	`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"7d2a4b10-2c3e-4f5a-8b6c-9d0e1f2a3b02","stage":"RequestReceived","requestURI":"/api/v1/namespaces/ns/pods","verb":"create","user":{"username":"system:serviceaccount:kube-system:replicaset-controller"},"objectRef":{"resource":"pods","namespace":"ns","apiVersion":"v1"},"requestReceivedTimestamp":"2026-11-23T10:00:00.000000Z","stageTimestamp":"2026-11-23T10:00:00.000000Z"}`,
	`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"7d2a4b10-2c3e-4f5a-8b6c-9d0e1f2a3b02","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/ns/pods","verb":"create","user":{"username":"system:serviceaccount:kube-system:replicaset-controller"},"objectRef":{"resource":"pods","namespace":"ns","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":201},"requestObject":{"kind":"Pod","apiVersion":"v1","metadata":{"generateName":"app-5d8f9c7b6-","namespace":"ns","labels":{"app":"web","fluent-pvc-operator.tech.zozo.com/fluent-pvc-name":"fpvc"}},"spec":{"containers":[{"name":"web","image":"nginx"}]},"status":{}},"responseObject":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"app-5d8f9c7b6-q2w9z","generateName":"app-5d8f9c7b6-","namespace":"ns","uid":"9a8b7c6d-0000-4000-8000-000000000002","resourceVersion":"5121","labels":{"app":"web","fluent-pvc-operator.tech.zozo.com/fluent-pvc-binding-name":"fpvc-8xk2mq7d4c","fluent-pvc-operator.tech.zozo.com/fluent-pvc-name":"fpvc"},"finalizers":["fluent-pvc-operator.tech.zozo.com/pod-protection"]},"spec":{"volumes":[{"name":"fluent-pvc","persistentVolumeClaim":{"claimName":"fpvc-8xk2mq7d4c"}}],"containers":[{"name":"web","image":"nginx"},{"name":"sidecar","image":"alpine"}]},"status":{"phase":"Pending","qosClass":"BestEffort"}},"requestReceivedTimestamp":"2026-11-23T10:00:00.000000Z","stageTimestamp":"2026-11-23T10:00:00.100000Z"}`,
	`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Request","auditID":"e4f5a6b7-1111-4222-8333-444455556603","stage":"ResponseComplete","requestURI":"/apis/events.k8s.io/v1/namespaces/default/events","verb":"create","user":{"username":"system:serviceaccount:fluent-pvc-operator-system:controller-manager"},"objectRef":{"resource":"events","namespace":"default","apiGroup":"events.k8s.io","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":201},"requestObject":{"kind":"Event","apiVersion":"events.k8s.io/v1","metadata":{"name":"fpvc.18a2b3c4d5e6f7a8","namespace":"default"},"eventTime":"2026-11-23T10:00:01.000000Z","reportingController":"fluent-pvc-operator","reportingInstance":"fluent-pvc-operator-x","action":"ClaimAbandoned","reason":"ClaimAbandoned","regarding":{"kind":"FluentPVC","name":"fpvc","uid":"11112222-0000-4000-8000-000000000004","apiVersion":"fluent-pvc-operator.tech.zozo.com/v1alpha1"},"note":"ns/fpvc-8xk2mq7d4c: namespace ns is being deleted: claim fpvc-8xk2mq7d4c was released without draining its data","type":"Warning"},"requestReceivedTimestamp":"2026-11-23T10:00:01.000000Z","stageTimestamp":"2026-11-23T10:00:01.002000Z"}`,
	``,
	`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"c0ffee00-`,
}

func TestReadAudit(t *testing.T) {
	events, err := ReadAudit(strings.NewReader(strings.Join(auditLines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 3 {
		t.Fatalf("read %d events, want the 3 ResponseComplete ones", len(events))
	}
	pvc, pod, ev := events[0], events[1], events[2]
	if pod.Verb != "create" || pod.ObjectRef.Resource != "pods" || pod.ObjectRef.Namespace != "ns" || pod.ObjectRef.Name != "" ||
		pod.ResponseStatus.Code != 201 || !pod.Succeeded() || pod.DryRun() {
		t.Errorf("pod create = %+v", pod)
	}
	if want := time.Date(2026, 11, 23, 10, 0, 0, 100_000_000, time.UTC); !pod.StageTimestamp.Equal(want) {
		t.Errorf("stageTimestamp = %v, want %v", pod.StageTimestamp, want)
	}
	if pod.User.Username != "system:serviceaccount:kube-system:replicaset-controller" || pod.AuditID == "" {
		t.Errorf("user %q, audit ID %q", pod.User.Username, pod.AuditID)
	}
	var p corev1.Pod
	if !decode(pod.ResponseObject, &p) || p.Name != "app-5d8f9c7b6-q2w9z" || p.UID == "" {
		t.Errorf("pod from response = %s/%s", p.Name, p.UID)
	}
	if pvc.ObjectRef.Name != "fpvc-8xk2mq7d4c" || ev.ObjectRef.APIGroup != "events.k8s.io" || len(ev.ResponseObject) != 0 {
		t.Errorf("pvc %+v, event %+v", pvc.ObjectRef, ev.ObjectRef)
	}

	r := Check(events, State{}, Options{})
	s := r.Stats
	if !r.OK() || s.PodsCreated != 1 || s.ClaimsReferenced != 1 || s.NotReleased != 1 || s.AbandonWarnings != 1 || s.Undecodable != 0 {
		t.Errorf("report = %+v", r)
	}
}

func TestReadAuditErrors(t *testing.T) {
	cases := []struct {
		name    string
		log     string
		want    int
		wantErr string
	}{
		{"empty", "", 0, ""},
		{"last line whole without newline", auditLines[0], 1, ""},
		{"last line cut short", auditLines[0] + "\n" + auditLines[0][:100], 1, ""},
		{"a bad line before the last", auditLines[0] + "\n{not json\n" + auditLines[0] + "\n", 1, "audit line 2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			events, err := ReadAudit(strings.NewReader(tc.log))
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("error = %v, want %q", err, tc.wantErr)
			}
			if len(events) != tc.want {
				t.Errorf("read %d events, want %d", len(events), tc.want)
			}
		})
	}
}

// policy is the part of an audit.k8s.io/v1 Policy the test evaluates.
type policy struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	OmitStages []string `json:"omitStages"`
	Rules      []struct {
		Level     string   `json:"level"`
		Verbs     []string `json:"verbs"`
		Resources []struct {
			Group         string   `json:"group"`
			Resources     []string `json:"resources"`
			ResourceNames []string `json:"resourceNames"`
		} `json:"resources"`
	} `json:"rules"`
}

// level is the level of the first rule matching a request, as
// kube-apiserver picks it (empty lists match everything); resource may
// name the object too, as "resource#name".
func (p policy) level(verb, group, resource string) string {
	resource, name, _ := strings.Cut(resource, "#")
	for _, r := range p.Rules {
		if len(r.Verbs) > 0 && !slices.Contains(r.Verbs, verb) {
			continue
		}
		match := len(r.Resources) == 0
		for _, g := range r.Resources {
			if g.Group == group && (len(g.Resources) == 0 || slices.Contains(g.Resources, resource)) &&
				(len(g.ResourceNames) == 0 || slices.Contains(g.ResourceNames, name)) {
				match = true
			}
		}
		if match {
			return r.Level
		}
	}
	return "None"
}

func TestPolicy(t *testing.T) {
	var p policy
	if err := yaml.Unmarshal(Policy, &p); err != nil {
		t.Fatal(err)
	}
	if p.APIVersion != "audit.k8s.io/v1" || p.Kind != "Policy" || !slices.Contains(p.OmitStages, "RequestReceived") {
		t.Errorf("policy header = %s %s, omitStages %v", p.APIVersion, p.Kind, p.OmitStages)
	}
	group := v1alpha1.GroupVersion.Group
	cases := []struct{ verb, group, resource, want string }{
		{"create", "", "pods", "RequestResponse"},
		{"delete", "", "pods", "RequestResponse"},
		{"patch", "", "persistentvolumeclaims", "RequestResponse"},
		{"deletecollection", "", "persistentvolumeclaims", "RequestResponse"},
		{"create", "batch", "jobs", "RequestResponse"},
		{"update", "batch", "jobs/status", "RequestResponse"},
		{"patch", "batch", "jobs/status", "RequestResponse"},
		{"update", group, "fluentpvcbindings", "RequestResponse"},
		{"update", group, "fluentpvcbindings/status", "RequestResponse"},
		{"delete", "", "namespaces", "RequestResponse"},
		{"create", "", "namespaces", "RequestResponse"},
		{"create", "", "events", "Request"},
		{"create", "events.k8s.io", "events", "Request"},
		{"get", "", "pods", "None"},
		{"list", "", "persistentvolumeclaims", "None"},
		{"watch", "batch", "jobs", "None"},
		{"patch", "", "pods/status", "RequestResponse"},
		{"create", "", "pods/binding", "RequestResponse"},
		{"update", "", "persistentvolumeclaims/status", "None"},
		{"patch", "", "events", "None"},
		{"update", "", "namespaces", "None"},
		{"create", "", "configmaps", "None"},
		{"update", "coordination.k8s.io", "leases#kube-scheduler", "None"},
		{"update", "coordination.k8s.io", "leases#fluent-pvc-operator.tech.zozo.com", "RequestResponse"},
	}
	for _, tc := range cases {
		if got := p.level(tc.verb, tc.group, tc.resource); got != tc.want {
			t.Errorf("%s %s/%s: level %s, want %s", tc.verb, tc.group, tc.resource, got, tc.want)
		}
	}
}

// TestRefusedFresh: a labelled pod sent without a claim that the pod
// webhook denies counts as refused; a copy that carries a claim, an
// unlabelled pod, another webhook's denial, an admitted pod and a dry run
// do not.
func TestRefusedFresh(t *testing.T) {
	pod := func(labels map[string]string) json.RawMessage {
		raw, err := json.Marshal(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: labels}})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	labelled := map[string]string{v1alpha1.FluentPVCNameLabelKey: "f"}
	copied := map[string]string{v1alpha1.FluentPVCNameLabelKey: "f", v1alpha1.BindingNameLabelKey: "f-abc"}
	denied := &ResponseStatus{Code: 403, Message: podWebhookDenial + ": the pod looks like a copy"}
	for name, tc := range map[string]struct {
		uri    string
		status *ResponseStatus
		obj    json.RawMessage
		want   bool
	}{
		"a fresh labelled pod denied":     {status: denied, obj: pod(labelled), want: true},
		"a copy carrying a claim, denied": {status: denied, obj: pod(copied)},
		"an unlabelled pod denied":        {status: denied, obj: pod(nil)},
		"denied by another webhook":       {status: &ResponseStatus{Code: 403, Message: `admission webhook "other.example.com" denied the request`}, obj: pod(labelled)},
		"admitted":                        {status: &ResponseStatus{Code: 201}, obj: pod(labelled)},
		"an admission that failed":        {status: &ResponseStatus{Code: 500, Message: podWebhookDenial + ": creating claim: the server is unavailable"}, obj: pod(labelled)},
		"a dry run denied":                {uri: "/api/v1/namespaces/ns/pods?dryRun=All", status: denied, obj: pod(labelled)},
	} {
		t.Run(name, func(t *testing.T) {
			e := &Event{Verb: "create", RequestURI: cmp.Or(tc.uri, "/api/v1/namespaces/ns/pods"), ObjectRef: &ObjectRef{Resource: "pods", Namespace: "ns"},
				ResponseStatus: tc.status, RequestObject: tc.obj}
			if got := refusedFresh(e); got != tc.want {
				t.Errorf("refusedFresh = %v, want %v", got, tc.want)
			}
		})
	}
}
