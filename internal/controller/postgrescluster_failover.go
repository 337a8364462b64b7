package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	"github.com/pgpilot/pgpilot-operator/internal/instance/agentapi"
)

// failover replaces a failed primary, one idempotent step per reconcile: choose the replica
// holding the most WAL (status.targetPrimary, with the reason), take the old primary out of the
// -rw Service, make sure it cannot accept writes (fenced on order, Lease given up, or Lease
// lapsed with no standby left to vouch for it), grant the Lease to the target, promote it, and
// hand over to decidePrimary, which labels it. The replicas follow the new timeline through the
// -rw Service; the old primary rejoins as a standby on its own (its agent obeys the Lease).
func (r *PostgresClusterReconciler) failover(ctx context.Context, s *scope) (*stop, error) {
	current := s.cluster.Status.CurrentPrimary
	if current == "" || (s.targetPrimary != "" && s.failoverReason == "") {
		return nil, nil // bootstrapping, or a switchover runs
	}
	if s.failoverReason == "" {
		if claimsOtherThan(s.observed, current) {
			return nil, nil // a completed switchover or failover: decidePrimary records it, or refuses two claims
		}
		return r.detectFailure(ctx, s, current)
	}
	s.primary = current
	target := s.targetPrimary
	if report := s.observed.reports[target]; report != nil && report.Role == agentapi.RolePrimary {
		recordPrimaryChange(s.cluster, "failover")
		r.event(s.cluster, s.observed.pod(target), corev1.EventTypeNormal, "FailoverCompleted", "Failover",
			"%s is the primary on timeline %d; %s was fenced and rejoins as a standby", target, report.Timeline, current)
		s.targetPrimary, s.failoverReason = "", ""
		r.leases().since(r.leases().failing, s.cluster.UID, false, time.Now())
		r.leases().since(r.leases().silent, s.cluster.UID, false, time.Now())
		return nil, nil // decidePrimary labels it
	}
	lease, err := r.readPrimaryLease(ctx, s)
	if err != nil {
		return nil, err
	}
	if report, pod := s.observed.reports[current], s.observed.pod(current); leaseHolder(lease) == current &&
		report != nil && report.Role == agentapi.RolePrimary && report.Unresponsive == "" && pod != nil && podReady(pod) {
		// Back before the Lease moved (a pod that restarted quickly, a slow answer): nothing
		// was granted, so the primary stays; decidePrimary labels it again.
		s.targetPrimary, s.failoverReason = "", ""
		r.event(s.cluster, s.observed.pod(current), corev1.EventTypeNormal, "FailoverCancelled", "Failover",
			"%s answers as the primary again before the primary lease moved; it stays the primary", current)
		return nil, nil
	}
	if leaseHolder(lease) != target {
		return r.fenceAndGrant(ctx, s, lease, target)
	}
	pod := s.observed.pod(target)
	if pod == nil || s.observed.reports[target] == nil {
		return failingOver(fmt.Sprintf("waiting for the agent of %s to answer, to promote it", target)), nil
	}
	promoted, err := r.agents().Promote(ctx, r.endpoint(s, pod), followerSlots(s, target))
	if err != nil {
		return nil, fmt.Errorf("promote %s: %w", target, err)
	}
	r.event(s.cluster, pod, corev1.EventTypeNormal, "Promoted", "Failover", "%s promoted on timeline %d", target, promoted.Timeline)
	return failingOver(fmt.Sprintf("%s promoted; waiting for its agent to report it", target)), nil
}

// detectFailure starts a failover once the primary has been failed for spec.failoverDelay and
// a replica can take over.
func (r *PostgresClusterReconciler) detectFailure(ctx context.Context, s *scope, current string) (*stop, error) {
	heard := r.leases().heardFrom(s.cluster.UID, current, s.observed.reports[current] != nil)
	// Agents not asked (no token or client certificate yet) are not silent: nothing is known.
	silent := heard && s.observed.reports != nil && primarySilent(s.observed, current)
	silentFor := r.leases().since(r.leases().silent, s.cluster.UID, silent, time.Now())
	if unrenewed, seen := r.leases().unchangedFor(s.cluster.UID, time.Now()); silent && seen {
		silentFor = max(silentFor, unrenewed) // no sign of life either way
	}
	problem := primaryProblem(s.observed, current, silentFor)
	failingFor := r.leases().since(r.leases().failing, s.cluster.UID, problem != "", time.Now())
	if problem == "" {
		if pod := s.observed.pod(current); s.primaryReplacedAt != nil && pod != nil && s.primaryReplacedAt.Before(&pod.CreationTimestamp) {
			s.primaryReplacedAt = nil // back, in its new pod
		}
		if !silent {
			return nil, nil
		}
		return &stop{reasonMessage: reasonMessage{"PrimaryNotAnswering", fmt.Sprintf(
			"the agent of the primary %s does not answer (%s); it counts as failed after %s", current,
			s.observed.failures[current], agentSilenceLimit)}, retry: true, after: time.Second}, nil
	}
	if s.primaryReplacedAt != nil && time.Since(s.primaryReplacedAt.Time) < primaryReplaceHold {
		// pgpilot replaces this pod on purpose (primaryUpdateMethod restart): no failover.
		s.primary = current
		if report := s.observed.reports[current]; report != nil && report.Fenced {
			return r.restartFencedPrimary(ctx, s, current, "the primary's pod was replaced")
		}
		return waitFor(reasonPrimaryReplacing, fmt.Sprintf("%s; its pod is being replaced in place (primaryUpdateMethod restart)", problem)), nil
	}
	s.primary = current
	// Start watching the Lease now: an unreachable primary's lapses LeaseExpiry after this.
	if _, err := r.readPrimaryLease(ctx, s); err != nil {
		return nil, err
	}
	if delay := failoverDelay(s.cluster); failingFor < delay {
		return &stop{reasonMessage: reasonMessage{"PrimaryFailing", fmt.Sprintf("%s; failing over in %s (spec.failoverDelay)",
			problem, (delay - failingFor).Round(time.Second))}, retry: true, after: min(delay-failingFor, time.Second)}, nil
	}
	candidate := chooseCandidate(s.observed, current)
	missing := quorumShortfall(s.cluster, s.observed, current)
	if candidate == "" || missing > 0 {
		if report := s.observed.reports[current]; report != nil && report.Fenced {
			// Nobody can take over: the primary itself, which holds every commit it
			// acknowledged, starts again.
			return r.restartFencedPrimary(ctx, s, current, problem)
		}
		if candidate == "" {
			return waitFor("NoFailoverCandidate", problem+"; no replica answers to take over, so pgpilot waits for it to come back"), nil
		}
		return waitFor("FailoverQuorumUnreachable", fmt.Sprintf(
			"%s; with dataDurability required, %d more replica(s) must answer to be sure the one promoted holds every acknowledged commit",
			problem, missing)), nil
	}
	s.targetPrimary, s.failoverReason = candidate, problem
	r.event(s.cluster, s.observed.pod(candidate), corev1.EventTypeWarning, "FailoverStarted", "Failover",
		"%s; failing over to %s, the replica holding the most WAL", problem, candidate)
	return failingOver(fmt.Sprintf("%s; failing over to %s", problem, candidate)), nil
}

// restartFencedPrimary grants the Lease again to the fenced primary (a single instance whose
// pod restarted or whose PostgreSQL crashed, or one no replica can replace): its agent starts
// it again as the primary.
func (r *PostgresClusterReconciler) restartFencedPrimary(ctx context.Context, s *scope, primary, problem string) (*stop, error) {
	lease, err := r.readPrimaryLease(ctx, s)
	if err != nil {
		return nil, err
	}
	if err := r.grantPrimaryLease(ctx, lease, primary); err != nil {
		return nil, err
	}
	r.event(s.cluster, s.observed.pod(primary), corev1.EventTypeWarning, "PrimaryRestarted", "Failover",
		"%s; no replica can take over, so the primary lease is granted to %s again and it starts as the primary", problem, primary)
	return waitFor("PrimaryRestarting", fmt.Sprintf("%s is starting again as the primary", primary)), nil
}

// fenceAndGrant makes sure the Lease's holder cannot accept writes, then grants the Lease to
// target. The -rw Service loses its endpoint first, whatever follows.
func (r *PostgresClusterReconciler) fenceAndGrant(ctx context.Context, s *scope, lease *coordinationv1.Lease, target string) (*stop, error) {
	if err := r.labelRoles(ctx, s, ""); err != nil {
		return nil, err
	}
	holder := leaseHolder(lease)
	fenced, why := r.fenceHolder(ctx, s, holder)
	if !fenced {
		return failingOver(fmt.Sprintf("waiting for %s to be fenced before promoting %s: %s", holder, target, why)), nil
	}
	if err := r.grantPrimaryLease(ctx, lease, target); err != nil {
		return nil, err
	}
	r.event(s.cluster, s.observed.pod(target), corev1.EventTypeNormal, "Fenced", "Failover",
		"%s cannot accept writes (%s); the primary lease is granted to %s", cmp.Or(holder, "no instance"), why, target)
	return failingOver(fmt.Sprintf("the primary lease is granted to %s; promoting it", target)), nil
}

// fenceHolder reports whether holder is known not to accept writes, and how it is known: it
// gave the Lease up, its agent says it is fenced or fences it now on order, or it cannot be
// reached and its Lease lapsed with no standby streaming.
func (r *PostgresClusterReconciler) fenceHolder(ctx context.Context, s *scope, holder string) (bool, string) {
	if holder == "" {
		return true, "it gave the primary lease up"
	}
	// Only an agent that answered this reconcile is asked: one cut off would hold the
	// reconcile for the request's whole timeout.
	if report, pod := s.observed.reports[holder], s.observed.pod(holder); report != nil && pod != nil {
		if report.Fenced {
			return true, "fenced: " + report.FencedReason
		}
		if status, err := r.agents().Fence(ctx, r.endpoint(s, pod)); err == nil && status.Fenced {
			return true, "its agent stopped PostgreSQL on pgpilot's order"
		}
	}
	return r.leases().leaseLapsed(s.cluster.UID, replicasMayStream(s.observed, holder), time.Now())
}

// primaryProblem says why the primary cannot serve, "" when it can. An agent that does not
// answer counts once the kubelet also finds the pod unready, or once it has been silent for
// agentSilenceLimit: one slow answer is no failure.
func primaryProblem(o *observed, primary string, silentFor time.Duration) string {
	pod := o.pod(primary)
	report := o.reports[primary]
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
	case report == nil && !podReady(pod):
		return fmt.Sprintf("the primary %s is not ready and its agent does not answer (%s)", primary, o.failures[primary])
	case report == nil && silentFor >= agentSilenceLimit:
		return fmt.Sprintf("the agent of the primary %s has not answered for %s though the pod is still reported ready: its node may be lost (%s)",
			primary, silentFor.Round(time.Second), o.failures[primary])
	}
	return ""
}

// agentSilenceLimit is how long the primary's agent may not answer while the API still calls
// its pod ready. A lost node's kubelet cannot report its pods unready; the node controller marks
// them only after its grace period (40 s and more), which is what makes other operators slow on
// node loss. A pod whose probes fail is unready after 4 s (2 s × 2), so a silence that outlasts
// that and one more question is no slow answer. Safety does not rest on it: the Lease must
// still lapse before another instance is promoted.
const agentSilenceLimit = 6 * time.Second

// primarySilent: the primary's pod exists and is ready, but its agent did not answer.
func primarySilent(o *observed, primary string) bool {
	pod := o.pod(primary)
	return pod != nil && podReady(pod) && o.reports[primary] == nil
}

// chooseCandidate is the replica that can take over with the least loss: the most WAL
// received, then replayed, then the lowest name; "" when no replica's agent answers.
func chooseCandidate(o *observed, primary string) string {
	type candidate struct {
		name               string
		received, replayed uint64
	}
	var candidates []candidate
	for name, report := range o.reports {
		pod := o.pod(name)
		if name == primary || report.Role != agentapi.RoleReplica || report.Unresponsive != "" || pod == nil || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		received, _ := parseLSN(report.ReceiveLSN)
		replayed, _ := parseLSN(report.ReplayLSN)
		candidates = append(candidates, candidate{name, max(received, replayed), replayed})
	}
	if len(candidates) == 0 {
		return ""
	}
	return slices.MinFunc(candidates, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(b.received, a.received), cmp.Compare(b.replayed, a.replayed), compareNames(a.name, b.name))
	}).name
}

// quorumShortfall is how many more replicas must answer before a failover may promote one in
// required mode. Every acknowledged commit is on at least n of the N-1 standbys, so any N-n of
// them include one that has it, and the one of those that received the most WAL has them all.
func quorumShortfall(c *pgv1.PostgresCluster, o *observed, primary string) int {
	sync := c.Spec.PostgreSQL.Synchronous
	if sync == nil || sync.DataDurability == pgv1.DurabilityPreferred {
		return 0
	}
	answering := 0
	for name, report := range o.reports {
		if name != primary && report.Role == agentapi.RoleReplica {
			answering++
		}
	}
	return max(0, int(c.Spec.Instances-max(sync.Number, 1))-answering)
}

// claimsOtherThan: an instance other than primary says it is a primary.
func claimsOtherThan(o *observed, primary string) bool {
	for name, report := range o.reports {
		if name != primary && report.Role == agentapi.RolePrimary {
			return true
		}
	}
	return false
}

// replicasMayStream: some instance other than the holder streams, or cannot tell (no answer).
func replicasMayStream(o *observed, holder string) bool {
	for i := range o.pods {
		name := o.pods[i].Name
		if name == holder {
			continue
		}
		report := o.reports[name]
		if report == nil || report.Streaming {
			return true
		}
	}
	return false
}

func failoverDelay(c *pgv1.PostgresCluster) time.Duration {
	if c.Spec.FailoverDelay == nil {
		return 0
	}
	return c.Spec.FailoverDelay.Duration
}

func failingOver(message string) *stop {
	return &stop{reasonMessage: reasonMessage{"FailingOver", message}, retry: true, after: switchoverStep}
}

// announceRejoins tells, once each, that a former primary became a standby of the new one and
// what only it had: its WAL from where the timelines diverged (rewind), or all of its data
// (clone after a failed rewind).
func (r *PostgresClusterReconciler) announceRejoins(_ context.Context, s *scope) (*stop, error) {
	for name, report := range s.observed.reports {
		rejoined := report.Rejoined
		if rejoined == nil || rejoined.At == recordedRejoin(s.cluster, name) {
			continue
		}
		message := fmt.Sprintf("%s rejoined as a standby by %s", name, rejoined.Method)
		switch {
		case rejoined.Method == agentapi.RejoinClone:
			message += fmt.Sprintf(" after pg_rewind failed (%s); its own data, last checkpoint %s on timeline %s, was replaced by a copy of the primary",
				rejoined.Error, rejoined.OldCheckpoint, rejoined.OldTimeline)
		case rejoined.DivergedAt != "":
			message += fmt.Sprintf("; the WAL it wrote from %s on (timeline %s, last checkpoint %s) never reached the new primary and was discarded",
				rejoined.DivergedAt, rejoined.OldTimeline, rejoined.OldCheckpoint)
		default:
			message += "; it had nothing the new primary lacks"
		}
		r.event(s.cluster, s.observed.pod(name), corev1.EventTypeWarning, "Rejoined", "Rejoin", "%s", message)
	}
	return nil, nil
}

func recordedRejoin(c *pgv1.PostgresCluster, name string) string {
	for _, st := range c.Status.InstancesStatus {
		if st.Name == name {
			return st.RejoinedAt
		}
	}
	return ""
}
