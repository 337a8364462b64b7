package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/ha"
)

// upgradeTarget is the switchover's last step for a major upgrade: the target, holding the
// Lease, is asked to upgrade itself instead of being promoted (the agent promotes it on the old
// major first). It is asked again on every step until its agent says the upgrade ran.
func (r *PostgresClusterReconciler) upgradeTarget(ctx context.Context, s *scope, pod *corev1.Pod) (*stop, error) {
	up := s.majorUpgrade
	target := pod.Name
	up.Instance = target
	endpoint := r.endpoint(s, pod)
	result, err := r.upgradeAgents().MajorUpgrade(ctx, endpoint)
	if err != nil {
		return nil, fmt.Errorf("major upgrade of %s: %w", target, err)
	}
	if !resultOf(result, up) || result.StoppedAt != "" && result.Step != agentapi.UpgradeStepDone {
		// None yet, or one that ended where it can be asked again (the agent refuses when it
		// cannot: past the point of no return, it is a primary of the new major).
		if result, err = r.upgradeAgents().StartMajorUpgrade(ctx, endpoint,
			agentapi.MajorUpgradeRequest{Mode: string(up.Mode), Slots: followerSlots(s, target)}); err != nil {
			return nil, fmt.Errorf("start the major upgrade of %s: %w", target, err)
		}
		r.event(s.cluster, pod, corev1.EventTypeNormal, "MajorUpgradeRunning", "MajorUpgrade",
			"%s replayed all of the old primary and holds the primary lease; pg_upgrade to PostgreSQL %d runs on it", target, up.To)
	}
	return switchingOver(fmt.Sprintf("upgrading %s to PostgreSQL %d (step %s)", target, up.To, result.Step)), nil
}

// resultOf: result is of this upgrade, not an earlier one the agent remembers.
func resultOf(result *agentapi.MajorUpgradeResult, up *pgv1.MajorUpgradeStatus) bool {
	if result == nil || result.To != int(up.To) {
		return false
	}
	started := timeOf(result.StartedAt)
	return started != nil && (up.CheckedAt == nil || !started.Before(up.CheckedAt))
}

// upgradeOpened: the target's server runs again as a primary (the new major's, or the old one
// put back): the switchover is over. Its agent promotes it on the old major before the upgrade;
// that promotion must not end the switchover.
func (r *PostgresClusterReconciler) upgradeOpened(ctx context.Context, s *scope, pod *corev1.Pod) (bool, error) {
	result, err := r.upgradeAgents().MajorUpgrade(ctx, r.endpoint(s, pod))
	if err != nil {
		return false, fmt.Errorf("major upgrade of %s: %w", pod.Name, err)
	}
	if !resultOf(result, s.majorUpgrade) {
		// Its agent restarted (an interrupted upgrade is reverted or finished before the agent
		// serves again): the server it runs says which.
		return true, nil
	}
	s.majorUpgrade.PgUpgradeMillis = result.PgUpgradeMillis
	// A revert is over once the job stopped: the old major's slots are made after its start.
	switch result.Step {
	case agentapi.UpgradeStepStarted, agentapi.UpgradeStepDone:
		return true, nil
	}
	return result.StoppedAt != "", nil
}

// afterMajorUpgradeSwitchover records how the upgrade ended once the switchover is over: the
// primary on the new major (the point of no return passed), or the old major back.
func (r *PostgresClusterReconciler) afterMajorUpgradeSwitchover(ctx context.Context, s *scope, up *pgv1.MajorUpgradeStatus) (*stop, error) {
	if s.targetPrimary != "" {
		return nil, nil // the switchover runs
	}
	report := s.observed.Reports[s.primary]
	if s.primary != up.Instance || report == nil || report.ServerVersion == "" {
		return checkingMajorUpgrade(up, fmt.Sprintf("waiting for %s to report its server", up.Instance)), nil
	}
	pod := s.observed.Pod(up.Instance)
	result, err := r.upgradeAgents().MajorUpgrade(ctx, r.endpoint(s, pod))
	if err != nil {
		return nil, fmt.Errorf("major upgrade of %s: %w", up.Instance, err)
	}
	if resultOf(result, up) {
		up.PgUpgradeMillis = result.PgUpgradeMillis
	}
	if majorOf(report.ServerVersion) != up.To {
		up.Step, up.Message = pgv1.MajorUpgradeReverted, "the upgrade failed before its point of no return"
		if result != nil && result.Error != "" {
			up.Message = result.Error
		}
		up.Message = truncate(up.Message+fmt.Sprintf("; PostgreSQL %d runs again with nothing lost. A new value of %s tries again; spec.postgresVersion set back to %d cancels",
			up.From, pgv1.RetryMajorUpgradeAnnotation, up.From), 2048)
		r.event(s.cluster, pod, corev1.EventTypeWarning, "MajorUpgradeReverted", "MajorUpgrade", "%s", up.Message)
		return nil, nil
	}
	s.postgresMajor = up.To
	up.Step, up.Message = pgv1.MajorUpgradeRebuildingReplicas, ""
	up.PointOfNoReturnAt, up.WritesResumedAt = now(), now()
	r.event(s.cluster, pod, corev1.EventTypeNormal, "MajorUpgradePointOfNoReturn", "MajorUpgrade",
		"%s runs PostgreSQL %s as the primary (pg_upgrade took %d ms); from here the upgrade only goes forward: the other instances are rebuilt on it",
		up.Instance, report.ServerVersion, up.PgUpgradeMillis)
	if resultOf(result, up) && !result.FollowKit {
		r.event(s.cluster, pod, corev1.EventTypeNormal, "MajorUpgradeNoFollowKit", "MajorUpgrade",
			"The other instances cannot join %s by links to their own files, and are rebuilt from its first backup: %s", up.Instance, truncate(result.FollowKitError, 512))
	}
	return checkingMajorUpgrade(up, "rebuilding the other instances on the new major"), nil
}

// rebuildReplicas rebuilds every instance still on the old major from the new major's first
// backup (a delta restore), or by a full clone when there is none, and ends the upgrade once all
// of them run the new major.
func (r *PostgresClusterReconciler) rebuildReplicas(ctx context.Context, s *scope, up *pgv1.MajorUpgradeStatus) (*stop, error) {
	s.postgresMajor = up.To
	primary := s.observed.Pod(s.primary)
	if primary == nil || s.primary != up.Instance {
		return checkingMajorUpgrade(up, "waiting for the new primary"), nil
	}
	result, err := r.upgradeAgents().MajorUpgrade(ctx, r.endpoint(s, primary))
	if err != nil {
		return nil, fmt.Errorf("major upgrade of %s: %w", up.Instance, err)
	}
	req := agentapi.MajorUpgradeRebuildRequest{}
	if result != nil && result.FollowKit {
		req.Kit = &agentapi.FollowKitSource{Address: r.agentAddress(primary), ServerName: pgbuilder.AgentServerName(s.cluster)}
	}
	if req.Kit == nil && result != nil && result.BackupLabel == "" && result.BackupError == "" && result.StoppedAt == "" && s.cluster.Spec.Backup != nil {
		return checkingMajorUpgrade(up, fmt.Sprintf("waiting for the first backup of PostgreSQL %d, which the other instances are rebuilt from", up.To)), nil
	}
	if result != nil {
		req.BackupLabel = result.BackupLabel
	}
	var waiting []string
	for i := range s.observed.Pods {
		pod := &s.observed.Pods[i]
		if pod.Name == s.primary {
			continue
		}
		done, err := r.rebuildReplica(ctx, s, up, pod, req)
		if err != nil {
			return nil, err
		}
		if !done {
			waiting = append(waiting, pod.Name)
		}
	}
	if len(waiting) > 0 || int32(len(s.observed.Pods)) != s.cluster.Spec.Instances {
		up.Message = fmt.Sprintf("rebuilding on PostgreSQL %d: %s", up.To, strings.Join(waiting, ", "))
		return checkingMajorUpgrade(up, up.Message), nil
	}
	up.Step, up.Message, up.CompletedAt = pgv1.MajorUpgradeCompleted, "", now()
	r.event(s.cluster, nil, corev1.EventTypeNormal, "MajorUpgradeCompleted", "MajorUpgrade",
		"Every instance runs PostgreSQL %d: %s", up.To, describeRebuilds(up.Replicas))
	return nil, nil
}

// rebuildReplica moves one instance to the new major; done once it streams from the new
// primary on it.
func (r *PostgresClusterReconciler) rebuildReplica(ctx context.Context, s *scope, up *pgv1.MajorUpgradeStatus, pod *corev1.Pod, req agentapi.MajorUpgradeRebuildRequest) (bool, error) {
	report := s.observed.Reports[pod.Name]
	record := replicaRecord(up, pod.Name)
	if record.RebuiltAt != nil {
		return true, nil
	}
	if report == nil || report.Unresponsive != "" {
		return false, nil
	}
	endpoint := r.endpoint(s, pod)
	result, err := r.upgradeAgents().MajorUpgradeRebuild(ctx, endpoint)
	if err != nil {
		return false, fmt.Errorf("rebuild of %s: %w", pod.Name, err)
	}
	if result != nil {
		record.Method, record.BytesCopied, record.BytesKept, record.Reason = result.Method, result.Copied, result.Kept, truncate(result.Reason, 512)
	}
	if majorOf(report.ServerVersion) == up.To && report.Role == agentapi.RoleReplica && report.Streaming {
		record.RebuiltAt = now()
		return true, nil
	}
	if majorOf(report.ServerVersion) == up.To || result != nil && result.StoppedAt == "" {
		return false, nil // rebuilt, not streaming yet; or rebuilding
	}
	if result != nil && result.Error != "" {
		r.event(s.cluster, pod, corev1.EventTypeWarning, "MajorUpgradeRebuildFailed", "MajorUpgrade",
			"Rebuilding %s on PostgreSQL %d failed, trying again: %s", pod.Name, up.To, result.Error)
	}
	if _, err := r.upgradeAgents().StartMajorUpgradeRebuild(ctx, endpoint, req); err != nil {
		return false, fmt.Errorf("start the rebuild of %s: %w", pod.Name, err)
	}
	how := rebuildPlan(req)
	r.event(s.cluster, pod, corev1.EventTypeNormal, "MajorUpgradeRebuilding", "MajorUpgrade", "Rebuilding %s on PostgreSQL %d %s", pod.Name, up.To, how)
	return false, nil
}

// rebuildPlan says how an instance is rebuilt on the new major, cheapest first.
func rebuildPlan(req agentapi.MajorUpgradeRebuildRequest) string {
	switch {
	case req.Kit != nil && req.BackupLabel != "":
		return "by the new primary's follow kit (its own relation files linked), or a delta restore of backup " + req.BackupLabel
	case req.Kit != nil:
		return "by the new primary's follow kit (its own relation files linked), or a full clone"
	case req.BackupLabel != "":
		return "by a delta restore of backup " + req.BackupLabel
	}
	return "by a full clone of the primary: the new major has no follow kit and no backup to restore from"
}

// replicaRecord is the status entry of instance name, added when missing.
func replicaRecord(up *pgv1.MajorUpgradeStatus, name string) *pgv1.MajorUpgradeReplica {
	for i := range up.Replicas {
		if up.Replicas[i].Name == name {
			return &up.Replicas[i]
		}
	}
	up.Replicas = append(up.Replicas, pgv1.MajorUpgradeReplica{Name: name})
	slices.SortFunc(up.Replicas, func(a, b pgv1.MajorUpgradeReplica) int { return ha.CompareNames(a.Name, b.Name) })
	return replicaRecord(up, name)
}

func describeRebuilds(replicas []pgv1.MajorUpgradeReplica) string {
	parts := make([]string, 0, len(replicas))
	for _, r := range replicas {
		part := fmt.Sprintf("%s by %s (%d MiB copied, %d MiB kept)", r.Name, r.Method, r.BytesCopied>>20, r.BytesKept>>20)
		if r.Reason != "" {
			part += ": " + r.Reason
		}
		parts = append(parts, part)
	}
	if len(parts) == 0 {
		return "no other instance"
	}
	return strings.Join(parts, "; ")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
