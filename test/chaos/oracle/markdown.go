package oracle

import (
	"fmt"
	"strings"
)

// Markdown renders the report as Markdown lines, without headings (the
// caller places them): a table of violations per invariant, a table of
// what was seen, then each violation and each excused release.
func (r Report) Markdown() []string {
	lines := []string{"| invariant | | violations |", "|---|---|---|"}
	for _, inv := range Invariants {
		lines = append(lines, fmt.Sprintf("| %s | %s | %d |", inv.ID, inv.Title, r.Count(inv.ID)))
	}
	s := r.Stats
	lines = append(lines, "", "| seen | count |", "|---|---|")
	for _, row := range []struct {
		what string
		n    int
	}{
		{"audit events (ResponseComplete)", s.AuditEvents},
		{"writes whose object did not decode", s.Undecodable},
		{"labelled pods created", s.PodsCreated},
		{"claims (PVC UIDs) they used", s.ClaimsReferenced},
		{"claim references to no live PVC", s.UnresolvedClaims},
		{"drain Jobs succeeded", s.DrainsSucceeded},
		{"releases checked (per pod)", s.ReleasesChecked},
		{"releases excused by namespace deletion", s.ReleasesExcused},
		{"claims never let go of in the log", s.NotReleased},
		{"ClaimAbandoned Warning events", s.AbandonWarnings},
		{"namespaces deleted", s.NamespacesDeleted},
	} {
		lines = append(lines, fmt.Sprintf("| %s | %d |", row.what, row.n))
	}
	if len(r.Violations) > 0 {
		lines = append(lines, "", "Violations:", "")
		for _, v := range r.Violations {
			lines = append(lines, fmt.Sprintf("- **%s** `%s`: %s", v.Invariant, v.Object, oneLine(v.Detail)))
		}
	}
	if len(r.Excused) > 0 {
		lines = append(lines, "", "Releases without a drain excused by their namespace's deletion:", "")
		for _, e := range r.Excused {
			warned := "no ClaimAbandoned Warning about it"
			if e.Warned {
				warned = "a ClaimAbandoned Warning was recorded"
			}
			lines = append(lines, fmt.Sprintf("- `%s` %s; namespace deletion requested %s; %s",
				e.Claim, e.Release, e.NamespaceDeleted, warned))
		}
	}
	return lines
}

// oneLine keeps a detail on its Markdown list item's line.
func oneLine(s string) string {
	return strings.ReplaceAll(s, "\n", " ")
}
