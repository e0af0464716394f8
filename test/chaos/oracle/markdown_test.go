package oracle

import (
	"strings"
	"testing"
)

// TestMarkdown checks the rendered tables and lists.
func TestMarkdown(t *testing.T) {
	l := newAuditLog()
	c1, c2 := l.claim("ns", "c1"), l.claim("gone", "c2")
	l.pod("ns", "a", "c1")
	l.pod("gone", "b", "c2")
	l.release(c1)
	l.deleteNamespace("gone")
	l.release(c2)
	md := strings.Join(Check(l.events, State{}, Options{}).Markdown(), "\n")
	for _, want := range []string{
		"| I1 | a claim serves one pod until it is drained | 0 |",
		"| I2 |",
		"| labelled pods created | 2 |",
		"| unlabelled pods created that mount a claim | 0 |",
		"| releases excused by namespace deletion | 1 |",
		"| releases excused by a user's deletion of the claim | 0 |",
		"- **I2** `persistentvolumeclaim ns/c1 (uid ",
		"- `gone/c2 (uid ",
		"no ClaimAbandoned Warning about it",
		"| I5 | a holder mounts a claim only while it is warm and until the pod it goes to starts | 0 |",
		"| holder pods the operator created | 0 |",
		"| pod started | 0 | 0s | 0s | 0s | 0s |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
