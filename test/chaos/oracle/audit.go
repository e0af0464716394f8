package oracle

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"
)

// StageResponseComplete is the audit stage of an event written once the
// response has been sent: the only stage whose events ReadAudit keeps.
const StageResponseComplete = "ResponseComplete"

// Event is the part of an audit.k8s.io/v1 Event that the oracle reads. The
// field names and JSON keys are those of the audit API, so a line of a
// kube-apiserver JSON audit log decodes into it; unknown keys are ignored.
type Event struct {
	// AuditID is unique per request; it is quoted in violations so that
	// the line can be found in the log.
	AuditID string `json:"auditID"`
	// Stage is the request stage the event was written at.
	Stage string `json:"stage"`
	// RequestURI is the request's path and query (dry runs are told by it).
	RequestURI string `json:"requestURI"`
	// Verb is the Kubernetes verb: create, update, patch, delete, ...
	Verb string `json:"verb"`
	// User is who made the request.
	User UserInfo `json:"user"`
	// ImpersonatedUser is whom User acted as, if anyone.
	ImpersonatedUser *UserInfo `json:"impersonatedUser,omitempty"`
	// ObjectRef names the object the request was about, if any.
	ObjectRef *ObjectRef `json:"objectRef,omitempty"`
	// ResponseStatus holds the HTTP code of the response.
	ResponseStatus *ResponseStatus `json:"responseStatus,omitempty"`
	// RequestObject is the request body (level Request and above).
	RequestObject json.RawMessage `json:"requestObject,omitempty"`
	// ResponseObject is the response body (level RequestResponse): for a
	// write, the object as persisted.
	ResponseObject json.RawMessage `json:"responseObject,omitempty"`
	// RequestReceivedTimestamp is when the request reached the API server.
	// Annotations are the audit annotations, among them the admission
	// webhooks' (failed-open.validating.webhook.admission.k8s.io/...).
	Annotations              map[string]string `json:"annotations,omitempty"`
	RequestReceivedTimestamp time.Time         `json:"requestReceivedTimestamp"`
	// StageTimestamp is when the event's stage was reached.
	StageTimestamp time.Time `json:"stageTimestamp"`
}

// UserInfo is who made a request.
type UserInfo struct {
	// Username is the authenticated user name.
	Username string `json:"username"`
}

// ObjectRef names the object of a request. For a create, Name is empty
// when the object was made from generateName, and UID is always empty:
// both are read from the response instead.
type ObjectRef struct {
	Resource    string `json:"resource,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	Name        string `json:"name,omitempty"`
	UID         string `json:"uid,omitempty"`
	APIGroup    string `json:"apiGroup,omitempty"`
	APIVersion  string `json:"apiVersion,omitempty"`
	Subresource string `json:"subresource,omitempty"`
}

// ResponseStatus is the part of a response's metav1.Status the oracle reads.
type ResponseStatus struct {
	// Code is the HTTP status code.
	Code int32 `json:"code,omitempty"`
	// Reason is the machine-readable reason of a failure.
	Reason string `json:"reason,omitempty"`
	// Message is the human-readable text of a failure.
	Message string `json:"message,omitempty"`
}

// Succeeded is true when the request got a 2xx response. An event without
// a response status is not known to have succeeded.
func (e *Event) Succeeded() bool {
	return e.ResponseStatus != nil && e.ResponseStatus.Code >= 200 && e.ResponseStatus.Code < 300
}

// DryRun is true when the request asked for a dry run: it changed nothing.
func (e *Event) DryRun() bool {
	u, err := url.ParseRequestURI(e.RequestURI)
	if err != nil {
		return false
	}
	return len(u.Query()["dryRun"]) > 0
}

// is tells whether the event is a verb on resource (and subresource, "" for
// the object itself) of API group group.
func (e *Event) is(group, resource, subresource string) bool {
	r := e.ObjectRef
	return r != nil && r.APIGroup == group && r.Resource == resource && r.Subresource == subresource
}

// Username is whom the request acted as: the impersonated user, if any,
// else the authenticated one.
func (e *Event) Username() string {
	if e.ImpersonatedUser != nil && e.ImpersonatedUser.Username != "" {
		return e.ImpersonatedUser.Username
	}
	return e.User.Username
}

// where is a short, human-readable place of the event in the log.
func (e *Event) where() string {
	return fmt.Sprintf("%s by %s (audit %s)", e.StageTimestamp.UTC().Format("2006-01-02T15:04:05.000000Z"), e.Username(), e.AuditID)
}

// ReadAudit reads a JSON-lines audit log and returns its ResponseComplete
// events in log order. Blank lines are skipped. A last line that does not
// end in a newline and does not decode is taken as cut short by a writer
// still at work, and dropped; any other line that does not decode is an
// error naming its line number.
func ReadAudit(r io.Reader) ([]Event, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	var events []Event
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return events, fmt.Errorf("reading audit line %d: %w", n, err)
		}
		last := err != nil
		if len(bytes.TrimSpace(line)) > 0 {
			var e Event
			if uerr := json.Unmarshal(line, &e); uerr != nil {
				if last {
					return events, nil
				}
				return events, fmt.Errorf("audit line %d: %w", n, uerr)
			}
			if e.Stage == StageResponseComplete {
				events = append(events, e)
			}
		}
		if last {
			return events, nil
		}
	}
}

// position places a write in the order of the API server's commits. rv is
// the resourceVersion of the object in the response: kube-apiserver on
// etcd3 sets it to the etcd revision of the write, one counter for every
// resource, so it orders commits exactly. When either side has none (a
// delete answered by a Status), or Options.OrderByTime is set, the stage
// timestamps are compared, then the order of the lines.
type position struct {
	rv   uint64
	at   time.Time
	line int
}

// positionOf is the position of event e (the line-th of the log) whose
// response carried resourceVersion rv ("" or not a number: unknown).
func positionOf(e *Event, line int, rv string) position {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		n = 0
	}
	return position{rv: n, at: e.StageTimestamp, line: line}
}
