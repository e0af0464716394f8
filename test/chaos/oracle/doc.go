// Package oracle is the independent judge of the chaos suite: from a
// kube-apiserver audit log (JSON lines of audit.k8s.io/v1 Events, written
// under Policy) and a dump of the final cluster state, it counts the
// violations of the operator's safety invariants:
//
//   - I1: a claim (one PVC object: namespace, name and UID) is used by two
//     created pods with no drain of it in between. Every pod that mounts a
//     claim counts, labelled or not (a copy made by kubectl debug
//     --copy-to), but the operator's drain and binder Job pods and its
//     holders: pods that Options.Operator created, labelled as the holder
//     of a warm claim, controlled by that claim and mounting it, and no
//     other PVC, read-only. A pod that only looks like a holder counts.
//     An unlabelled pod that the API server admitted without the
//     operator's mount webhook's answer (its audit annotation says the
//     webhook failed open: no replica answered, and the failure policy is
//     Ignore) is listed in Report.FailedOpen instead;
//   - I2: a claim a created pod used is let go of (its pvc-protection
//     finalizer removed, turned warm, or deleted) before a drain Job of it
//     succeeded, unless its namespace's deletion, or a deletion of the
//     claim by one of Options.Users, was requested first;
//   - I3: the settled final state still holds claims, bindings, drain or
//     binder Jobs and pods, or pods with the pod-protection finalizer;
//   - I4: a pod of the final state is stuck Terminating;
//   - I5: a holder mounts a claim while the claim is not warm: (i) it was
//     created when the claim, by its last logged write, was not warm
//     (after its checkout); (ii) the claim was handed to a pod (the next
//     pod created that uses it) which started (the first logged write of
//     it, pods/status included, shows phase Running or a container
//     running or having run), and the holder's deletion was not requested
//     before that start nor while a replica of the operator led for at
//     most Options.HolderGrace after it; (iii) it
//     was created, and its deletion not requested, when a drain Job of
//     the claim was created; (iv) a pod labelled as a holder is in the
//     final state while its claim (by the UID of its controller
//     reference) is not there, warm and not being deleted.
//
// On kwok a pod is Running within milliseconds of its binding, which is
// what the operator waits for before it deletes the holder: the two race,
// hence the grace of (ii). Only the leader acts, so the time (ii) counts
// leaves out the spans in which none led: from the last write of the
// operator's leader-election Lease (Options.Lease) before a new leader
// took it to that taking. Report.Holders gives the step-away delays, from
// the pod's binding (pods/binding) and from its start to the operator's
// request to delete the holder, to choose the grace from.
//
// It shares no code with the operator's decisions: it reads the log and
// the dump only, and imports nothing of the repository but the API's keys
// and types. Nothing here talks to an API server.
//
// What it cannot see: a write the API server committed but did not log
// (killed between the commit and the audit event) is missing, so a lost
// drain success reads as a violation and a lost release is noticed only at
// the claim's next logged write; the log's objects are ordered by their
// resourceVersions, which kube-apiserver on one etcd sets to the commit
// revision (Options.OrderByTime for anything else); a drain counts if its
// Job was created after the pod and succeeded in time, whether or not the
// pod was gone by then; and what a drain Job's pod did is taken from the
// Job's Complete condition alone.
package oracle
