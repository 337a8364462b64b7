package controller

import (
	"cmp"
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	"github.com/pgpilot/pgpilot-operator/internal/ha"
)

// failover replaces a failed primary, in idempotent steps that follow each other in one
// reconcile as far as they can: choose the replica holding the most WAL (status.targetPrimary,
// with the reason), take the old primary out of the -rw Service, make sure it cannot accept
// writes (fenced on order, Lease given up, or Lease lapsed with no standby left to vouch for
// it), grant the Lease to the target, promote it, and hand over to decidePrimary, which labels
// it. The replicas follow the new timeline through the -rw Service; the old primary rejoins as
// a standby on its own (its agent obeys the Lease).
func (r *PostgresClusterReconciler) failover(ctx context.Context, s *scope) (*stop, error) {
	current := s.cluster.Status.CurrentPrimary
	if current == "" || (s.targetPrimary != "" && s.failoverReason == "") {
		return nil, nil // bootstrapping, or a switchover runs
	}
	if s.failoverReason == "" {
		if ha.ClaimsOtherThan(&s.observed.Observed, current) {
			return nil, nil // a completed switchover or failover: decidePrimary records it, or refuses two claims
		}
		if stop, err := r.detectFailure(ctx, s, current); stop != nil || err != nil || s.failoverReason == "" {
			return stop, err
		}
	}
	s.primary = current
	target := s.targetPrimary
	if report := s.observed.Reports[target]; report != nil && report.Role == agentapi.RolePrimary {
		r.attachPeers(ctx, s, target)
		recordPrimaryChange(s.cluster, "failover")
		r.event(s.cluster, s.observed.Pod(target), corev1.EventTypeNormal, "FailoverCompleted", "Failover",
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
	if report, pod := s.observed.Reports[current], s.observed.Pod(current); leaseHolder(lease) == current &&
		report != nil && report.Role == agentapi.RolePrimary && report.Unresponsive == "" && pod != nil && ha.PodReady(pod) {
		// Back before the Lease moved (a pod that restarted quickly, a slow answer): nothing
		// was granted, so the primary stays; decidePrimary labels it again.
		s.targetPrimary, s.failoverReason = "", ""
		r.attachPeers(ctx, s, "")
		r.event(s.cluster, s.observed.Pod(current), corev1.EventTypeNormal, "FailoverCancelled", "Failover",
			"%s answers as the primary again before the primary lease moved; it stays the primary", current)
		return nil, nil
	}
	if leaseHolder(lease) != target {
		if stop, err := r.fenceAndGrant(ctx, s, lease, target); stop != nil || err != nil {
			return stop, err
		}
	}
	pod := s.observed.Pod(target)
	if pod == nil || s.observed.Reports[target] == nil {
		return failingOver(fmt.Sprintf("waiting for the agent of %s to answer, to promote it", target)), nil
	}
	promoted, err := r.agents().Promote(ctx, r.endpoint(s, pod), followerSlots(s, target))
	if err != nil {
		return nil, fmt.Errorf("promote %s: %w", target, err)
	}
	r.event(s.cluster, pod, corev1.EventTypeNormal, "Promoted", "Failover", "%s promoted on timeline %d", target, promoted.Timeline)
	// The -rw Service follows at once rather than after the next report: the Lease names the
	// target and it answered as promoted. decidePrimary labels it anyway when this fails.
	if err := r.labelRoles(ctx, s, target); err != nil {
		logf.FromContext(ctx).Info("labelling the promoted primary failed; the next reconcile labels it", "error", err.Error())
	}
	return failingOver(fmt.Sprintf("%s promoted; waiting for its agent to report it", target)), nil
}

// ofMajor leaves out the instances whose server is of another major than the data's: after a
// major upgrade's point of no return, a replica not yet rebuilt still runs the old one, and
// promoting it would lose every write since.
func ofMajor(o *ha.Observed, major int32) *ha.Observed {
	kept := &ha.Observed{Pods: o.Pods, Reports: map[string]*agentapi.Status{}, Failures: o.Failures}
	for name, report := range o.Reports {
		if major == 0 || report.ServerVersion == "" || majorOf(report.ServerVersion) == major {
			kept.Reports[name] = report
		}
	}
	return kept
}

// silentAskAgain: a primary whose agent did not answer is asked again this soon (each question
// is bounded by unreadyAgentTimeout): on a lost node the second silence starts the failover.
const silentAskAgain = 250 * time.Millisecond

// detectFailure starts a failover once the primary has been failed for spec.failoverDelay and
// a replica can take over.
func (r *PostgresClusterReconciler) detectFailure(ctx context.Context, s *scope, current string) (*stop, error) {
	heard := r.leases().heardFrom(s.cluster.UID, current, s.observed.Reports[current] != nil)
	// Agents not asked (no token or client certificate yet) are not silent: nothing is known.
	silent := heard && s.observed.Reports != nil && ha.PrimarySilent(&s.observed.Observed, current)
	silentFor := r.leases().since(r.leases().silent, s.cluster.UID, silent, time.Now())
	if unrenewed, seen := r.leases().unchangedFor(s.cluster.UID, time.Now()); silent && seen && silentFor > 0 {
		// No sign of life either way; asked twice in a row at least, so that one slow answer
		// on a loaded node while the Lease is late is no failure.
		silentFor = max(silentFor, unrenewed)
	}
	problem := ha.PrimaryProblem(&s.observed.Observed, current, silentFor)
	failingFor := r.leases().since(r.leases().failing, s.cluster.UID, problem != "", time.Now())
	if problem == "" {
		if pod := s.observed.Pod(current); s.primaryReplacedAt != nil && pod != nil && s.primaryReplacedAt.Before(&pod.CreationTimestamp) {
			s.primaryReplacedAt = nil // back, in its new pod
		}
		if !silent {
			return nil, nil
		}
		return &stop{reasonMessage: reasonMessage{"PrimaryNotAnswering", fmt.Sprintf(
			"the agent of the primary %s does not answer (%s); it counts as failed after %s", current,
			s.observed.Failures[current], ha.AgentSilenceLimit)}, retry: true, after: silentAskAgain}, nil
	}
	if s.primaryReplacedAt != nil && time.Since(s.primaryReplacedAt.Time) < primaryReplaceHold {
		// pgpilot replaces this pod on purpose (primaryUpdateMethod restart): no failover.
		s.primary = current
		if report := s.observed.Reports[current]; report != nil && report.Fenced {
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
	candidate := ha.ChooseCandidate(ofMajor(&s.observed.Observed, s.cluster.Status.PostgresMajor), current)
	missing := ha.QuorumShortfall(s.cluster, &s.observed.Observed, current)
	if candidate == "" || missing > 0 {
		if report := s.observed.Reports[current]; report != nil && report.Fenced {
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
	r.event(s.cluster, s.observed.Pod(candidate), corev1.EventTypeWarning, "FailoverStarted", "Failover",
		"%s; failing over to %s, the replica holding the most WAL", problem, candidate)
	return nil, nil // the next steps follow at once
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
	r.event(s.cluster, s.observed.Pod(primary), corev1.EventTypeWarning, "PrimaryRestarted", "Failover",
		"%s; no replica can take over, so the primary lease is granted to %s again and it starts as the primary", problem, primary)
	return waitFor("PrimaryRestarting", fmt.Sprintf("%s is starting again as the primary", primary)), nil
}

// fenceAndGrant makes sure the Lease's holder cannot accept writes, then grants the Lease to
// target and lets the standbys detached from the holder stream again; nil when granted. The
// -rw Service loses its endpoint first, whatever follows.
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
	r.event(s.cluster, s.observed.Pod(target), corev1.EventTypeNormal, "Fenced", "Failover",
		"%s cannot accept writes (%s); the primary lease is granted to %s", cmp.Or(holder, "no instance"), why, target)
	r.attachPeers(ctx, s, target)
	return nil, nil
}

// fenceHolder reports whether holder is known not to accept writes, and how it is known: it
// gave the Lease up, its agent says it is fenced or fences it now on order, or it cannot be
// reached, its Lease lapsed and every other instance was detached from it long enough.
func (r *PostgresClusterReconciler) fenceHolder(ctx context.Context, s *scope, holder string) (bool, string) {
	if holder == "" {
		return true, "it gave the primary lease up"
	}
	// Only an agent that answered this reconcile is asked: one cut off would hold the
	// reconcile for the request's whole timeout.
	if report, pod := s.observed.Reports[holder], s.observed.Pod(holder); report != nil && pod != nil {
		if report.Fenced {
			return true, "fenced: " + report.FencedReason
		}
		if status, err := r.agents().Fence(ctx, r.endpoint(s, pod)); err == nil && status.Fenced {
			return true, "its agent stopped PostgreSQL on pgpilot's order"
		}
	}
	if unchanged, _ := r.leases().unchangedFor(s.cluster.UID, time.Now()); unchanged < leaseAlarmAfter {
		// It still reaches the API server: detached standbys would only hold its commits back.
		r.attachPeers(ctx, s, "")
		return false, fmt.Sprintf("it renewed its lease %s ago", unchanged.Round(time.Second))
	}
	gone, unknown := r.peersGone(ctx, s, holder)
	return r.leases().leaseLapsed(s.cluster.UID, gone, unknown, time.Now())
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
	for name, report := range s.observed.Reports {
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
		r.event(s.cluster, s.observed.Pod(name), corev1.EventTypeWarning, "Rejoined", "Rejoin", "%s", message)
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
