package oracle

import (
	"fmt"
	"strings"
	"time"
)

// Markdown renders the report as Markdown lines, without headings (the
// caller places them): a table of violations per invariant, a table of
// what was seen, then each violation and each excused release.
func (r Report) Markdown() []string {
	lines := []string{"| invariant | | violations |", "|---|---|---|"}
	for _, inv := range Invariants {
		lines = append(lines, fmt.Sprintf("| %s | %s | %d |", inv.ID, inv.Title, r.Count(inv.ID)))
	}
	lines = append(lines, fmt.Sprintf("| refused | labelled pods created without a claim that the pod webhook denied | %d |", len(r.Refused)))
	s := r.Stats
	lines = append(lines, "", "| seen | count |", "|---|---|")
	for _, row := range []struct {
		what string
		n    int
	}{
		{"audit events (ResponseComplete)", s.AuditEvents},
		{"writes whose object did not decode", s.Undecodable},
		{"labelled pods created", s.PodsCreated},
		{"unlabelled pods created that mount a claim", s.UnlabelledClaimPods},
		{"of those, admitted without the mount webhook's answer (failed open) beside the claim's pod", len(r.FailedOpen)},
		{"claims (PVC UIDs) they used", s.ClaimsReferenced},
		{"claims reserved ahead of their pods (reserved-by)", s.ClaimsReserved},
		{"of those, used by created pods", s.ReservedClaimsUsed},
		{"claim references to no live PVC", s.UnresolvedClaims},
		{"drain Jobs succeeded", s.DrainsSucceeded},
		{"releases checked (per pod)", s.ReleasesChecked},
		{"releases excused by namespace deletion", s.ReleasesExcused},
		{"releases excused by a user's deletion of the claim", s.ReleasesExcusedByUser},
		{"claims never let go of in the log", s.NotReleased},
		{"ClaimAbandoned Warning events", s.AbandonWarnings},
		{"namespaces deleted", s.NamespacesDeleted},
		{"holder pods the operator created", r.Holders.Created},
		{"holders whose claim went to a pod that started", r.Holders.Checked},
		{"of those, deleted after that start (within the grace)", r.Holders.AfterStart},
		{"of those, deleted after a span in which no replica led", r.Holders.Failovers},
		{"new leaders of the operator (Lease taken from another)", r.Holders.LeaderChanges},
	} {
		lines = append(lines, fmt.Sprintf("| %s | %d |", row.what, row.n))
	}
	lines = append(lines, r.Holders.markdown()...)
	if len(r.Violations) > 0 {
		lines = append(lines, "", "Violations:", "")
		for _, v := range r.Violations {
			lines = append(lines, fmt.Sprintf("- **%s** `%s`: %s", v.Invariant, v.Object, oneLine(v.Detail)))
		}
	}
	if len(r.Refused) > 0 {
		lines = append(lines, "", "Labelled pods refused at creation (audit IDs):", "")
		for _, id := range r.Refused {
			lines = append(lines, "- `"+id+"`")
		}
	}
	if len(r.FailedOpen) > 0 {
		lines = append(lines, "", "Claims shared with an unlabelled pod admitted without the mount webhook's answer (no replica answered; its failure policy is Ignore):", "")
		for _, f := range r.FailedOpen {
			lines = append(lines, "- "+oneLine(f))
		}
	}
	if len(r.Excused) > 0 {
		lines = append(lines, "", "Releases without a drain excused by their namespace's deletion or a user's deletion of the claim:", "")
		for _, e := range r.Excused {
			warned := "no ClaimAbandoned Warning about it"
			if e.Warned {
				warned = "a ClaimAbandoned Warning was recorded"
			}
			cause := "namespace deletion requested " + e.NamespaceDeleted
			if e.ClaimDeleted != "" {
				cause = "claim deletion requested " + e.ClaimDeleted
			}
			lines = append(lines, fmt.Sprintf("- `%s` %s; %s; %s", e.Claim, e.Release, cause, warned))
		}
	}
	return lines
}

// oneLine keeps a detail on its Markdown list item's line.
func oneLine(s string) string {
	return strings.ReplaceAll(s, "\n", " ")
}

// markdown renders the holders' step-away delays and I5's grace.
func (h HolderReport) markdown() []string {
	lines := []string{"",
		fmt.Sprintf("Holder step-away: from the pod a holder's claim went to, to the operator's request to delete the holder "+
			"(I5 allows up to %s of the time a replica led after the pod started):", h.Grace),
		"", "| from | n | min | p50 | p99 | max |", "|---|---|---|---|---|---|"}
	for _, row := range []struct {
		from string
		d    Delays
	}{
		{"pod bound to a node", h.BoundToDeleted},
		{"pod started", h.StartedToDeleted},
		{"pod started, counting only the time a replica led", h.LedToDeleted},
	} {
		d := row.d
		lines = append(lines, fmt.Sprintf("| %s | %d | %s | %s | %s | %s |", row.from, d.N, ms(d.Min), ms(d.P50), ms(d.P99), ms(d.Max)))
	}
	return lines
}

// ms renders d to the millisecond.
func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }
