// Package ha holds pgpilot's high-availability decisions as pure functions of what the operator
// observed of a cluster's instances (their pods and their agents' reports): whether the primary
// failed, which replica takes over, whether enough replicas answered, who may be promoted when a
// switchover's target missed the end of the WAL. The reconciler observes, keeps the memory
// (leases, timings) and acts; these functions only decide, and are tested with plain tables.
package ha

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// Observed is how a cluster's instances are now, read once per reconcile before any decision.
type Observed struct {
	// Pods are the cluster's instance pods, in ordinal order.
	Pods []corev1.Pod
	// Reports are the agents' answers by pod name, and Failures why an agent did not answer;
	// both are nil when the agents were not asked (no credentials to ask them with yet).
	Reports  map[string]*agentapi.Status
	Failures map[string]string
}

// Pod is the instance pod named name, or nil.
func (o *Observed) Pod(name string) *corev1.Pod {
	for i := range o.Pods {
		if o.Pods[i].Name == name {
			return &o.Pods[i]
		}
	}
	return nil
}

// PrimaryProblem says why the primary cannot serve, "" when it can. An agent that does not
// answer counts once the kubelet also finds the pod unready, or once it has been silent for
// AgentSilenceLimit: one slow answer is no failure.
func PrimaryProblem(o *Observed, primary string, silentFor time.Duration) string {
	pod := o.Pod(primary)
	report := o.Reports[primary]
	switch {
	case pod == nil:
		return fmt.Sprintf("the pod of the primary %s is gone", primary)
	case !pod.DeletionTimestamp.IsZero():
		return fmt.Sprintf("the primary %s is being deleted", primary)
	case report != nil && report.Fenced:
		return fmt.Sprintf("the primary %s is fenced: %s", primary, report.FencedReason)
	case report != nil && report.Unresponsive != "":
		return fmt.Sprintf("the primary %s is frozen: %s", primary, report.Unresponsive)
	case report != nil && report.Role != agentapi.RolePrimary:
		return fmt.Sprintf("the primary %s runs as a %s", primary, report.Role)
	case report == nil && !PodReady(pod):
		return fmt.Sprintf("the primary %s is not ready and its agent does not answer (%s)", primary, o.Failures[primary])
	case report == nil && silentFor >= AgentSilenceLimit:
		return fmt.Sprintf("the agent of the primary %s has not answered for %s though the pod is still reported ready: its node may be lost (%s)",
			primary, silentFor.Round(time.Second), o.Failures[primary])
	}
	return ""
}

// AgentSilenceLimit is how long the primary's agent may not answer while the API still calls
// its pod ready. A lost node's kubelet cannot report its pods unready; the node controller marks
// them only after its grace period (40 s and more), which is what makes other operators slow on
// node loss. A pod whose probes fail is unready after 4 s (2 s × 2), so a silence that outlasts
// that and one more question is no slow answer. Safety does not rest on it: the Lease must
// still lapse before another instance is promoted.
const AgentSilenceLimit = 6 * time.Second

// PrimarySilent: the primary's pod exists and is ready, but its agent did not answer.
func PrimarySilent(o *Observed, primary string) bool {
	pod := o.Pod(primary)
	return pod != nil && PodReady(pod) && o.Reports[primary] == nil
}

// ChooseCandidate is the replica that can take over with the least loss: the most WAL
// received, then replayed, then the lowest name; "" when no replica's agent answers.
func ChooseCandidate(o *Observed, primary string) string {
	type candidate struct {
		name               string
		received, replayed uint64
	}
	var candidates []candidate
	for name, report := range o.Reports {
		pod := o.Pod(name)
		if name == primary || report.Role != agentapi.RoleReplica || report.Unresponsive != "" || pod == nil || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		received, _ := ParseLSN(report.ReceiveLSN)
		replayed, _ := ParseLSN(report.ReplayLSN)
		candidates = append(candidates, candidate{name, max(received, replayed), replayed})
	}
	if len(candidates) == 0 {
		return ""
	}
	return slices.MinFunc(candidates, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(b.received, a.received), cmp.Compare(b.replayed, a.replayed), CompareNames(a.name, b.name))
	}).name
}

// QuorumShortfall is how many more replicas must answer before a failover may promote one in
// required mode. Every acknowledged commit is on at least n of the N-1 standbys, so any N-n of
// them include one that has it, and the one of those that received the most WAL has them all.
func QuorumShortfall(c *pgv1.PostgresCluster, o *Observed, primary string) int {
	sync := c.Spec.PostgreSQL.Synchronous
	if sync == nil || sync.DataDurability == pgv1.DurabilityPreferred {
		return 0
	}
	answering := 0
	for name, report := range o.Reports {
		if name != primary && report.Role == agentapi.RoleReplica {
			answering++
		}
	}
	return max(0, int(c.Spec.Instances-max(sync.Number, 1))-answering)
}

// ClaimsOtherThan: an instance other than primary says it is a primary.
func ClaimsOtherThan(o *Observed, primary string) bool {
	for name, report := range o.Reports {
		if name != primary && report.Role == agentapi.RolePrimary {
			return true
		}
	}
	return false
}

// SwitchoverFallback is the instance to promote instead of a target that missed the end of the
// old primary's WAL: one that replayed up to lsn, a replica (the furthest) before the old
// primary, so that the primary moves as asked. "" when none has.
func SwitchoverFallback(o *Observed, old, target, lsn string) string {
	var candidates []string
	for name, report := range o.Reports {
		pod := o.Pod(name)
		if name != target && report.Role == agentapi.RoleReplica && pod != nil && pod.DeletionTimestamp.IsZero() && ReplayedPast(report, lsn) {
			candidates = append(candidates, name)
		}
	}
	if len(candidates) == 0 {
		return ""
	}
	rank := func(name string) (isOld int, replayed uint64) {
		if name == old {
			isOld = 1
		}
		replayed, _ = ParseLSN(o.Reports[name].ReplayLSN)
		return isOld, replayed
	}
	return slices.MinFunc(candidates, func(a, b string) int {
		aOld, aReplayed := rank(a)
		bOld, bReplayed := rank(b)
		return cmp.Or(cmp.Compare(aOld, bOld), cmp.Compare(bReplayed, aReplayed), CompareNames(a, b))
	})
}

// ReplayedPast reports whether a standby has replayed WAL up to lsn.
func ReplayedPast(report *agentapi.Status, lsn string) bool {
	replayed, ok1 := ParseLSN(report.ReplayLSN)
	want, ok2 := ParseLSN(lsn)
	return ok1 && ok2 && replayed >= want
}

// ParseLSN reads PostgreSQL's textual WAL position, two hexadecimal halves ("0/3000060").
func ParseLSN(lsn string) (uint64, bool) {
	hi, lo, ok := strings.Cut(lsn, "/")
	if !ok {
		return 0, false
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	return h<<32 | l, err1 == nil && err2 == nil
}

// FormatLSN writes a WAL position as PostgreSQL does, ParseLSN's inverse.
func FormatLSN(lsn uint64) string {
	return fmt.Sprintf("%X/%X", lsn>>32, uint32(lsn))
}

// CompareNames orders instance pods by ordinal (db-2 before db-10).
func CompareNames(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func PodReady(pod *corev1.Pod) bool {
	if !pod.DeletionTimestamp.IsZero() {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
