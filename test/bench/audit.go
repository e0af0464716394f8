package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/st-tech/fluent-pvc-operator/apis/v1alpha1"
	"github.com/st-tech/fluent-pvc-operator/webhook"
)

// auditPolicy is kube-apiserver's audit policy on the kwok tier when the
// cost phase runs: it logs, at level Metadata (who, what, when, the
// response's code; no bodies), every create, update, patch, delete,
// deletecollection, get and list of a resource, so that the cost phase
// can tell which writes and uncached reads the operator makes.
//
// The operator cannot be told apart in the policy: cluster.RunOperator
// runs it with the admin kubeconfig, whose client certificate kwokctl also
// gives kube-controller-manager, kube-scheduler and kwok, and the bench
// uses it too, so they are all the same user (and a policy cannot match a
// user agent). The parser (tallyAudit) keeps the operator's requests by
// their user agent instead: client-go's default, named after the binary,
// bin/manager (operatorUserAgent). Running the operator as another user
// (OperatorOptions.AsServiceAccount impersonates its ServiceAccount, with
// config/default's RBAC only) would change what the other phases measure.
//
// To keep the log small, it leaves out what only other components do,
// often: the control plane's bookkeeping in kube-system, kube-public and
// kube-node-lease (leader and node leases), kwok's node and pod status
// heartbeats, the scheduler's bindings, kube-controller-manager's status
// writes of claims, volumes and Jobs (the operator writes the status of
// FluentPVCs and FluentPVCBindings only), watches, non-resource requests
// (health checks, metrics) and the RequestReceived stage. The cost phase
// compares the writes it finds with rest_client_requests_total, so that a
// write the policy would hide shows as a difference.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
omitManagedFields: true
rules:
  - level: None
    namespaces: [kube-system, kube-public, kube-node-lease]
  - level: None
    resources:
      - group: ""
        resources: [nodes/status, pods/status, pods/binding, persistentvolumes/status, persistentvolumeclaims/status]
      - group: batch
        resources: [jobs/status]
  - level: None
    nonResourceURLs: ["*"]
  - level: Metadata
    verbs: [create, update, patch, delete, deletecollection, get, list]
  - level: None
`

// operatorUserAgent starts the user agent of the operator's requests:
// client-go's default (rest.DefaultKubernetesUserAgent), which controller-
// runtime keeps, begins with the binary's name, bin/manager.
const operatorUserAgent = "manager/"

// auditEvent is the part of an audit.k8s.io/v1 Event that tallyAudit
// reads; a line of kube-apiserver's JSON audit log decodes into it.
type auditEvent struct {
	Stage          string          `json:"stage"`
	Verb           string          `json:"verb"`
	UserAgent      string          `json:"userAgent"`
	ObjectRef      *auditObjectRef `json:"objectRef,omitempty"`
	ResponseStatus *struct {
		Code int32 `json:"code,omitempty"`
	} `json:"responseStatus,omitempty"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
	StageTimestamp           time.Time `json:"stageTimestamp"`
}

type auditObjectRef struct {
	Resource    string `json:"resource,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	Name        string `json:"name,omitempty"`
	APIGroup    string `json:"apiGroup,omitempty"`
	Subresource string `json:"subresource,omitempty"`
}

// auditQuery says which part of the audit log tallyAudit reads.
type auditQuery struct {
	// From and To bound the requests' receipt by the API server.
	From, To time.Time
	// Pods divides the counts.
	Pods int
	// Namespace is the phase's: the operator's requests about namespaced
	// objects elsewhere are other pods' work (the reservations of other
	// pools, kept and extended meanwhile), counted in Elsewhere only.
	Namespace string
	// Admitted are pods of Namespace whose create calls (the API server's
	// receipt to its response) are admissions: the operator's reads
	// received during one are counted in AdmissionReads.
	Admitted []string
}

// auditTally is what the operator asked of the API server, per pod: by
// "verb resource[/subresource]" (requestKey).
type auditTally struct {
	// Writes are creates, updates, patches, deletes and deletecollections.
	Writes map[string]float64 `json:"writes"`
	// Failed are the Writes whose response was not a 2xx (a conflict, a
	// claim already gone, ...); they are in Writes too.
	Failed map[string]float64 `json:"failed,omitempty"`
	// Reads are gets and lists: the uncached reads (the informers behind
	// the cache list only when they start or must watch anew, and their
	// watches are not logged).
	Reads map[string]float64 `json:"reads,omitempty"`
	// AdmissionReads are the Reads received while an Admitted pod's create
	// call was in flight: the webhook's, unless a controller's read of an
	// earlier pod fell into the same time.
	AdmissionReads map[string]float64 `json:"admissionReads,omitempty"`
	// WebhookReads are the Reads made by the operator's webhooks, known by
	// their user agent (webhook.UserAgentSuffix): an admission's own.
	WebhookReads map[string]float64 `json:"webhookReads,omitempty"`
	// Elsewhere are the requests about namespaced objects outside
	// Namespace, in none of the above: work for other pods than the
	// phase's, such as the extensions of other pools' reservations.
	Elsewhere float64 `json:"elsewhere,omitempty"`
	// ElsewhereWrites are the writes among them, by requestKey.
	ElsewhereWrites map[string]float64 `json:"elsewhereWrites,omitempty"`
}

// WriteTotal is the sum of Writes.
func (t auditTally) WriteTotal() float64 {
	return sumValues(t.Writes)
}

// sumValues is the sum of m's values.
func sumValues(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

var (
	auditWriteVerbs = []string{"create", "update", "patch", "delete", "deletecollection"}
	auditReadVerbs  = []string{"get", "list"}
)

// requestKey is "verb resource[/subresource]", with the API group in
// parentheses unless it is core, batch or the operator's, so that core
// events and events.k8s.io events stay apart.
func requestKey(verb string, ref *auditObjectRef) string {
	r := ref.Resource
	if ref.Subresource != "" {
		r += "/" + ref.Subresource
	}
	switch ref.APIGroup {
	case "", "batch", v1alpha1.GroupVersion.Group:
	default:
		r += " (" + ref.APIGroup + ")"
	}
	return verb + " " + r
}

// tallyAudit reads a kube-apiserver JSON-lines audit log and tallies the
// operator's requests (user agent operatorUserAgent) received within
// q.From and q.To, divided by q.Pods. Only ResponseComplete events are
// read. A last line without a newline that does not decode is taken as
// cut short by the API server still writing it, and dropped; any other
// line that does not decode is an error.
func tallyAudit(r io.Reader, q auditQuery) (auditTally, error) {
	t := auditTally{Writes: map[string]float64{}, Failed: map[string]float64{}, Reads: map[string]float64{}, AdmissionReads: map[string]float64{}, WebhookReads: map[string]float64{}, ElsewhereWrites: map[string]float64{}}
	type window struct{ from, to time.Time }
	var admissions []window
	var reads []auditEvent
	add := func(e auditEvent) {
		ref := e.ObjectRef
		if e.Stage != "ResponseComplete" || ref == nil || e.RequestReceivedTimestamp.Before(q.From) || e.RequestReceivedTimestamp.After(q.To) {
			return
		}
		if !strings.HasPrefix(e.UserAgent, operatorUserAgent) {
			if e.Verb == "create" && ref.APIGroup == "" && ref.Resource == "pods" && ref.Subresource == "" &&
				ref.Namespace == q.Namespace && slices.Contains(q.Admitted, ref.Name) {
				admissions = append(admissions, window{e.RequestReceivedTimestamp, e.StageTimestamp})
			}
			return
		}
		key := requestKey(e.Verb, ref)
		if ref.Namespace != "" && ref.Namespace != q.Namespace {
			if slices.Contains(auditWriteVerbs, e.Verb) {
				t.ElsewhereWrites[key]++
				t.Elsewhere++
			} else if slices.Contains(auditReadVerbs, e.Verb) {
				t.Elsewhere++
			}
			return
		}
		switch {
		case slices.Contains(auditWriteVerbs, e.Verb):
			t.Writes[key]++
			if e.ResponseStatus == nil || e.ResponseStatus.Code < 200 || e.ResponseStatus.Code > 299 {
				t.Failed[key]++
			}
		case slices.Contains(auditReadVerbs, e.Verb):
			t.Reads[key]++
			reads = append(reads, e)
			if strings.HasSuffix(e.UserAgent, " "+webhook.UserAgentSuffix) {
				t.WebhookReads[key]++
			}
		}
	}
	br := bufio.NewReaderSize(r, 1<<20)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return t, err
		}
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			var e auditEvent
			if derr := json.Unmarshal(trimmed, &e); derr != nil {
				if err == io.EOF {
					break // cut short
				}
				return t, fmt.Errorf("audit log line %d: %w", n, derr)
			}
			add(e)
		}
		if err == io.EOF {
			break
		}
	}
	for _, e := range reads {
		for _, a := range admissions {
			if !e.RequestReceivedTimestamp.Before(a.from) && !e.RequestReceivedTimestamp.After(a.to) {
				t.AdmissionReads[requestKey(e.Verb, e.ObjectRef)]++
				break
			}
		}
	}
	if q.Pods > 0 {
		for _, m := range []map[string]float64{t.Writes, t.Failed, t.Reads, t.AdmissionReads, t.WebhookReads, t.ElsewhereWrites} {
			for k := range m {
				m[k] /= float64(q.Pods)
			}
		}
		t.Elsewhere /= float64(q.Pods)
	}
	return t, nil
}

// openAuditLog opens the audit log at path after the backups kube-apiserver
// rotated out of it (at 100 MB, its default), oldest first: <name>-<time>
// beside it, whose times sort as their names do.
func openAuditLog(path string) (io.Reader, func(), error) {
	ext := filepath.Ext(path)
	backups, err := filepath.Glob(strings.TrimSuffix(path, ext) + "-*" + ext)
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(backups)
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	var readers []io.Reader
	for _, p := range append(backups, path) {
		f, err := os.Open(p)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		files = append(files, f)
		readers = append(readers, f)
	}
	return io.MultiReader(readers...), closeAll, nil
}

// auditRows are the keys of the tallies, the largest sum first, then by
// name.
func auditRows(tallies ...map[string]float64) []string {
	sum := map[string]float64{}
	for _, m := range tallies {
		for k, v := range m {
			sum[k] += v
		}
	}
	keys := make([]string, 0, len(sum))
	for k := range sum {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if sum[keys[i]] != sum[keys[j]] {
			return sum[keys[i]] > sum[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}
