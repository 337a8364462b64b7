package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/ha"
)

// switchoverCatchUp is how long a demoted primary's WAL may take to reach the target; a clean
// shutdown waits for the connected standbys, so it takes a second or less but for a target
// that was not connected then.
const switchoverCatchUp = 20 * time.Second

// switchoverStep is how soon a running switchover looks again: its steps take seconds, and
// the cluster has no primary in between.
const switchoverStep = time.Second

// switchover runs a planned switchover to the instance the switchover annotation names, one
// idempotent step per reconcile, each decided from what was observed and what the status
// recorded, so that a restarted operator resumes it: fence the primary (no pod labelled
// primary: the -rw Service has no endpoint), demote it (a clean shutdown; where its WAL ended
// goes into the status), wait until the target has replayed that far, promote the target,
// and hand over to decidePrimary, which labels it. No acknowledged commit is lost.
func (r *PostgresClusterReconciler) switchover(ctx context.Context, s *scope) (*stop, error) {
	s.switchoverProblem = unknownSwitchoverTarget(s)
	if s.failoverReason != "" {
		return nil, nil // a failover runs
	}
	if s.targetPrimary == "" {
		return r.startSwitchover(s)
	}
	old, target := s.cluster.Status.CurrentPrimary, s.targetPrimary
	s.primary = old // the status keeps naming it until the target is promoted
	targetReport := s.observed.Reports[target]
	if targetReport != nil && targetReport.Role == agentapi.RolePrimary && s.switchoverReason == SwitchoverForMajorUpgrade {
		if opened, err := r.upgradeOpened(ctx, s, s.observed.Pod(target)); err != nil || !opened {
			return switchingOver(fmt.Sprintf("upgrading %s to PostgreSQL %d", target, s.majorUpgrade.To)), err
		}
	}
	if targetReport != nil && targetReport.Role == agentapi.RolePrimary {
		s.targetPrimary, s.switchoverLSN, s.switchoverReason = "", "", ""
		recordPrimaryChange(s.cluster, "switchover")
		r.event(s.cluster, s.observed.Pod(target), corev1.EventTypeNormal, "SwitchoverCompleted", "Switchover",
			"%s is the primary on timeline %d; %s follows it", target, targetReport.Timeline, old)
		return nil, nil // decidePrimary labels it
	}
	if s.switchoverLSN == "" && s.switchoverReason == "" && s.cluster.Annotations[pgv1.SwitchoverAnnotation] != target {
		// Withdrawn before the primary was demoted: nothing changed yet, decidePrimary labels
		// the primary again. After the demotion there is no way back but forward.
		s.targetPrimary = ""
		r.event(s.cluster, nil, corev1.EventTypeNormal, "SwitchoverCancelled", "Switchover",
			"The switchover to %s was withdrawn before %s was demoted; %s stays the primary", target, old, old)
		return nil, nil
	}
	if err := r.labelRoles(ctx, s, ""); err != nil {
		return nil, err
	}
	if s.switchoverLSN == "" {
		return r.demoteForSwitchover(ctx, s, old)
	}
	// The old primary shut down and runs as a standby: it no longer renews the Lease.
	lease, err := r.readPrimaryLease(ctx, s)
	if err != nil {
		return nil, err
	}
	// The Lease goes to the target only once it has replayed all of the old primary's WAL.
	// From then on its report may say nothing of its replay (it promotes, or stops for
	// pg_upgrade): choosing another target then would make two primaries.
	if leaseHolder(lease) != target {
		if st := r.awaitCatchUp(s, old); st != nil {
			return st, nil
		}
	}
	target = s.targetPrimary
	pod := s.observed.Pod(target)
	if pod == nil {
		return switchingOver(fmt.Sprintf("waiting for the pod of %s", target)), nil
	}
	if leaseHolder(lease) != target {
		if err := r.grantPrimaryLease(ctx, lease, target); err != nil {
			return nil, err
		}
	}
	if s.switchoverReason == SwitchoverForMajorUpgrade && s.majorUpgrade != nil {
		return r.upgradeTarget(ctx, s, pod)
	}
	promoted, err := r.agents().Promote(ctx, r.endpoint(s, pod), followerSlots(s, target))
	if err != nil {
		return nil, fmt.Errorf("promote %s: %w", target, err)
	}
	r.event(s.cluster, pod, corev1.EventTypeNormal, "Promoted", "Switchover", "%s promoted on timeline %d", target, promoted.Timeline)
	return switchingOver(fmt.Sprintf("%s promoted; waiting for its agent to report it", target)), nil
}

// startSwitchover begins a switchover when the annotation names an instance other than the
// primary, the cluster is healthy and the target streams. Else it says why in the status and
// stops nothing: a switchover that cannot start (a typo, a sick cluster) must never hold up a
// failover.
func (r *PostgresClusterReconciler) startSwitchover(s *scope) (*stop, error) {
	target := s.cluster.Annotations[pgv1.SwitchoverAnnotation]
	current := s.cluster.Status.CurrentPrimary
	// The annotation asks for one switchover: once acted on (or already true), it does nothing
	// more, so a later failover does not move the primary back. Removing it re-arms it.
	if target == s.switchoverRequest {
		return nil, nil
	}
	if target == "" || target == current {
		s.switchoverRequest = target
		return nil, nil
	}
	if current == "" {
		return nil, nil
	}
	if s.switchoverProblem != nil {
		return nil, nil
	}
	s.primary = current
	report := s.observed.Reports[target]
	if report == nil || report.Role != agentapi.RoleReplica || !report.Streaming || !assessHealth(s).allReady() {
		s.waiting = &reasonMessage{"SwitchoverWaiting", fmt.Sprintf("a switchover to %s waits for a healthy cluster in which it streams", target)}
		return nil, nil
	}
	s.targetPrimary, s.switchoverRequest = target, target
	r.event(s.cluster, s.observed.Pod(target), corev1.EventTypeNormal, "SwitchoverStarted", "Switchover",
		"Switching over from %s to %s", current, target)
	return switchingOver(fmt.Sprintf("switching over from %s to %s", current, target)), nil
}

// unknownSwitchoverTarget says that the switchover annotation asks for an instance the cluster
// does not have, whatever else runs (a failover too), so the condition holds steady.
func unknownSwitchoverTarget(s *scope) *reasonMessage {
	target := s.cluster.Annotations[pgv1.SwitchoverAnnotation]
	if target == "" || target == s.switchoverRequest || target == s.cluster.Status.CurrentPrimary || s.observed.Pod(target) != nil {
		return nil
	}
	return &reasonMessage{"SwitchoverTargetUnknown", fmt.Sprintf(
		"%s names %s, which is not an instance of this cluster", pgv1.SwitchoverAnnotation, target)}
}

func (r *PostgresClusterReconciler) demoteForSwitchover(ctx context.Context, s *scope, old string) (*stop, error) {
	pod := s.observed.Pod(old)
	if pod == nil || s.observed.Reports[old] == nil {
		return switchingOver(fmt.Sprintf("waiting for the agent of %s to answer, to demote it", old)), nil
	}
	demoted, err := r.agents().Demote(ctx, r.endpoint(s, pod))
	if err != nil {
		return nil, fmt.Errorf("demote %s: %w", old, err)
	}
	s.switchoverLSN = demoted.ShutdownLSN
	if s.switchoverReason == SwitchoverForMajorUpgrade && s.majorUpgrade != nil {
		s.majorUpgrade.WritesStoppedAt = now()
	}
	r.event(s.cluster, pod, corev1.EventTypeNormal, "Demoted", "Switchover",
		"%s shut down (clean: %t) with its WAL ending at %s, and follows as a standby", old, demoted.Clean, demoted.ShutdownLSN)
	return switchingOver(fmt.Sprintf("%s demoted; waiting for %s to replay up to %s", old, s.targetPrimary, demoted.ShutdownLSN)), nil
}

// awaitCatchUp holds the promotion until the target has replayed the old primary's WAL to its
// end. A target that missed that end (its WAL receiver reconnecting while the primary was
// fenced, when nothing serves that WAL) would hold it forever: after switchoverCatchUp, an
// instance that has all of it becomes the target instead.
func (r *PostgresClusterReconciler) awaitCatchUp(s *scope, old string) *stop {
	target := s.targetPrimary
	if report := s.observed.Reports[target]; report != nil && ha.ReplayedPast(report, s.switchoverLSN) {
		return nil
	}
	waiting := fmt.Sprintf("waiting for %s to replay the WAL of %s up to %s", target, old, s.switchoverLSN)
	if started := s.cluster.Status.TargetPrimaryTimestamp; started != nil && time.Since(started.Time) < switchoverCatchUp {
		return switchingOver(waiting)
	}
	instead := ha.SwitchoverFallback(&s.observed.Observed, old, target, s.switchoverLSN)
	if instead == "" {
		return switchingOver(fmt.Sprintf("%s; no instance has replayed that far for %s", waiting, switchoverCatchUp))
	}
	s.targetPrimary = instead
	r.event(s.cluster, s.observed.Pod(instead), corev1.EventTypeWarning, "SwitchoverRetargeted", "Switchover",
		"%s did not replay the WAL of %s up to %s within %s; promoting %s, which did", target, old, s.switchoverLSN, switchoverCatchUp, instead)
	return nil
}

func switchingOver(message string) *stop {
	return &stop{reasonMessage: reasonMessage{"SwitchingOver", message}, retry: true, after: switchoverStep}
}

// followerSlots are the replication slots the new primary needs: one for every other instance.
func followerSlots(s *scope, target string) []string {
	var slots []string
	for i := range int(s.cluster.Spec.Instances) {
		if pod := pgbuilder.InstancePodName(s.cluster, i); pod != target {
			slots = append(slots, agentapi.SlotName(pod))
		}
	}
	return slots
}
