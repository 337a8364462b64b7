package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/ha"
)

// A major upgrade, started by raising spec.postgresVersion, goes in steps recorded in
// status.majorUpgrade, each decided from what was observed, so that a restarted operator
// resumes it:
//
//   - Preparing: the pod template moves to the new major's image with the old major's server
//     carried in (an init container of the old image); the update stage rolls the pods as for
//     any template change. The data is untouched and the cluster serves meanwhile.
//   - Checking: pg_upgrade --check and pgpilot's own checks run on a streaming replica while
//     every replica streams. Problems leave the cluster on the old major (CheckFailed, each
//     named), checked again every few minutes.
//   - Upgrading: a switchover to that replica (postgrescluster_switchover.go) whose last step is
//     the agent's upgrade instead of a promotion: writes stop cleanly, the replica replays all of
//     the old primary, is promoted, upgraded and started as the new major's primary. A failure
//     before the new server's first start puts the old major back, promoted (Reverted).
//   - RebuildingReplicas: the other instances are rebuilt from the new major's first backup by
//     delta restore, or cloned in full.

// SwitchoverForMajorUpgrade is status.switchoverReason of the switchover that carries the
// cluster to the new major.
const SwitchoverForMajorUpgrade = "a major upgrade"

// How soon a running major upgrade looks again, and how often a failed check is run again (the
// user may have fixed what it found without changing the spec).
const (
	majorUpgradeStep    = 2 * time.Second
	majorUpgradeRecheck = 3 * time.Minute
)

// advanceMajorUpgrade starts, moves on or cancels the cluster's major upgrade. It runs last in
// the HA lane: its stops hold only the follow lane, which must not roll pods in the middle of
// a check or a rebuild; in Preparing it stops nothing, since the follow lane rolls the pods.
func (r *PostgresClusterReconciler) advanceMajorUpgrade(ctx context.Context, s *scope) (*stop, error) {
	data, want := s.cluster.Status.PostgresMajor, s.cluster.Spec.PostgresVersion
	up := s.majorUpgrade
	if data == 0 || s.failoverReason != "" {
		return nil, nil // a new cluster, or a failover runs
	}
	if up.BeforePointOfNoReturn() && (want <= data || want != up.To) {
		r.event(s.cluster, nil, corev1.EventTypeNormal, "MajorUpgradeCancelled", "MajorUpgrade",
			"The upgrade from PostgreSQL %d to %d was withdrawn before its point of no return; the cluster stays on PostgreSQL %d", up.From, up.To, data)
		s.majorUpgrade, up = nil, nil
	}
	if (up == nil || up.Ended()) && want > data {
		up = &pgv1.MajorUpgradeStatus{From: data, To: want, Mode: upgradeMode(s.cluster), Step: pgv1.MajorUpgradePreparing, StartedAt: now(),
			// A retry asked of an earlier upgrade is not one of this one.
			RetryRequest: truncate(s.cluster.Annotations[pgv1.RetryMajorUpgradeAnnotation], 256)}
		s.majorUpgrade = up
		r.event(s.cluster, nil, corev1.EventTypeNormal, "MajorUpgradeStarted", "MajorUpgrade",
			"Upgrading from PostgreSQL %d to %d (%s mode): the pods move to the new image with PostgreSQL %d carried in", up.From, up.To, up.Mode, up.From)
	}
	if up == nil {
		return nil, nil
	}
	if retry := s.cluster.Annotations[pgv1.RetryMajorUpgradeAnnotation]; retry != "" && retry != up.RetryRequest &&
		(up.Step == pgv1.MajorUpgradeCheckFailed || up.Step == pgv1.MajorUpgradeReverted) {
		r.event(s.cluster, nil, corev1.EventTypeNormal, "MajorUpgradeRetried", "MajorUpgrade",
			"Checking the upgrade to PostgreSQL %d again, as %s asks", up.To, pgv1.RetryMajorUpgradeAnnotation)
		up.RetryRequest, up.Step, up.Message, up.Instance = truncate(retry, 256), pgv1.MajorUpgradeChecking, "", ""
	}
	switch up.Step {
	case pgv1.MajorUpgradePreparing:
		return r.prepareMajorUpgrade(s, up), nil
	case pgv1.MajorUpgradeChecking, pgv1.MajorUpgradeCheckFailed:
		return r.checkMajorUpgrade(ctx, s, up)
	case pgv1.MajorUpgradeUpgrading:
		return r.afterMajorUpgradeSwitchover(ctx, s, up)
	case pgv1.MajorUpgradeRebuildingReplicas:
		return r.rebuildReplicas(ctx, s, up)
	}
	return nil, nil
}

func upgradeMode(c *pgv1.PostgresCluster) pgv1.MajorUpgradeMode {
	if c.Spec.MajorUpgradeMode == pgv1.MajorUpgradeCopy {
		return pgv1.MajorUpgradeCopy
	}
	return pgv1.MajorUpgradeLink
}

func now() *metav1.Time {
	t := metav1.Now()
	return &t
}

// prepareMajorUpgrade waits until every instance runs the new image (with the old server
// carried) and the cluster is whole again.
func (r *PostgresClusterReconciler) prepareMajorUpgrade(s *scope, up *pgv1.MajorUpgradeStatus) *stop {
	image, st := r.postgresImage(s.cluster, up.To)
	if st != nil {
		up.Message = st.message
		return nil
	}
	for i := range s.observed.Pods {
		if pod := &s.observed.Pods[i]; !runsCarried(pod, image) {
			up.Message = fmt.Sprintf("moving the instances to the image of PostgreSQL %d, with PostgreSQL %d carried in; %s is not yet", up.To, up.From, pod.Name)
			s.waiting = &reasonMessage{"MajorUpgradePreparing", up.Message}
			return nil
		}
	}
	if int32(len(s.observed.Pods)) != s.cluster.Spec.Instances || !assessHealth(s).allReady() {
		up.Message = "every instance runs the new image; waiting for all of them to be ready and streaming"
		s.waiting = &reasonMessage{"MajorUpgradePreparing", up.Message}
		return nil
	}
	up.Step, up.Message = pgv1.MajorUpgradeChecking, ""
	return checkingMajorUpgrade(up, "every instance runs the new image; checking the upgrade")
}

// runsCarried: the pod runs image with an older major's server carried in.
func runsCarried(pod *corev1.Pod, image string) bool {
	carried := false
	for _, c := range pod.Spec.InitContainers {
		carried = carried || c.Name == pgbuilder.CarryContainerName
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == pgbuilder.PostgresContainerName {
			return carried && c.Image == image && pod.DeletionTimestamp.IsZero()
		}
	}
	return false
}

func checkingMajorUpgrade(up *pgv1.MajorUpgradeStatus, message string) *stop {
	return &stop{reasonMessage: reasonMessage{"MajorUpgrade" + string(up.Step), message}, retry: true, after: majorUpgradeStep}
}

// checkMajorUpgrade runs the agent's checks on a streaming replica and, once they pass, starts
// the switchover that upgrades it.
func (r *PostgresClusterReconciler) checkMajorUpgrade(ctx context.Context, s *scope, up *pgv1.MajorUpgradeStatus) (*stop, error) {
	if !assessHealth(s).allReady() {
		up.Message = "the checks wait for every instance to be ready and every replica to stream"
		s.waiting = &reasonMessage{"MajorUpgradeWaiting", up.Message}
		return nil, nil
	}
	if report := s.observed.Reports[up.Instance]; report == nil || report.Role != agentapi.RoleReplica || !report.Streaming {
		up.Instance = ha.ChooseCandidate(&s.observed.Observed, s.primary)
	}
	pod := s.observed.Pod(up.Instance)
	if pod == nil {
		return checkingMajorUpgrade(up, "waiting for a streaming replica to check the upgrade on"), nil
	}
	endpoint := r.endpoint(s, pod)
	result, err := r.upgradeAgents().MajorUpgradeCheck(ctx, endpoint)
	if err != nil {
		return nil, fmt.Errorf("major upgrade check on %s: %w", up.Instance, err)
	}
	if !currentCheck(result, up) {
		if _, err := r.upgradeAgents().StartMajorUpgradeCheck(ctx, endpoint, agentapi.MajorUpgradeCheckRequest{Mode: string(up.Mode)}); err != nil {
			return nil, fmt.Errorf("start the major upgrade check on %s: %w", up.Instance, err)
		}
		return checkingMajorUpgrade(up, fmt.Sprintf("checking the upgrade to PostgreSQL %d on %s", up.To, up.Instance)), nil
	}
	switch result.Phase {
	case agentapi.UpgradeCheckRunning:
		return checkingMajorUpgrade(up, fmt.Sprintf("checking the upgrade to PostgreSQL %d on %s", up.To, up.Instance)), nil
	case agentapi.UpgradeCheckPassed:
		up.CheckedAt, up.Problems, up.Message = timeOf(result.StoppedAt), nil, ""
		up.Step = pgv1.MajorUpgradeUpgrading
		s.targetPrimary, s.switchoverReason = up.Instance, SwitchoverForMajorUpgrade
		r.event(s.cluster, pod, corev1.EventTypeNormal, "MajorUpgradeChecked", "MajorUpgrade",
			"The upgrade to PostgreSQL %d passed its checks on %s; writes stop while %s is upgraded", up.To, up.Instance, up.Instance)
		return switchingOver(fmt.Sprintf("upgrading %s to PostgreSQL %d", up.Instance, up.To)), nil
	}
	problems := result.Problems
	if result.Phase == agentapi.UpgradeCheckError {
		problems = []string{"the check could not run: " + result.Error}
	}
	if up.Step != pgv1.MajorUpgradeCheckFailed || !timeOf(result.StoppedAt).Equal(up.CheckedAt) {
		r.event(s.cluster, pod, corev1.EventTypeWarning, "MajorUpgradeCheckFailed", "MajorUpgrade",
			"The upgrade to PostgreSQL %d is held: %s", up.To, strings.Join(problems, "; "))
	}
	up.Step, up.CheckedAt = pgv1.MajorUpgradeCheckFailed, timeOf(result.StoppedAt)
	up.Problems = problems[:min(len(problems), 32)]
	up.Message = fmt.Sprintf("the cluster stays on PostgreSQL %d until the problems are fixed; checked again every %s (at once with a new value of %s), or set spec.postgresVersion back to %d to cancel",
		up.From, majorUpgradeRecheck, pgv1.RetryMajorUpgradeAnnotation, up.From)
	return nil, nil
}

// currentCheck: result is a check of this upgrade, recent enough to act on.
func currentCheck(result *agentapi.MajorUpgradeCheckResult, up *pgv1.MajorUpgradeStatus) bool {
	if result == nil || result.To != int(up.To) || result.Mode != string(up.Mode) {
		return false
	}
	started := timeOf(result.StartedAt)
	if started == nil || (up.StartedAt != nil && started.Before(&metav1.Time{Time: up.StartedAt.Truncate(time.Second)})) {
		return false // a check of an earlier upgrade
	}
	stopped := timeOf(result.StoppedAt)
	if up.Step == pgv1.MajorUpgradeChecking && up.CheckedAt != nil && stopped != nil && !stopped.After(up.CheckedAt.Time) {
		return false // what was acted on before a retry
	}
	return result.Phase == agentapi.UpgradeCheckRunning || result.Phase == agentapi.UpgradeCheckPassed ||
		stopped != nil && time.Since(stopped.Time) < majorUpgradeRecheck
}

// timeOf parses an agent's RFC 3339 time; nil when empty or malformed.
func timeOf(value string) *metav1.Time {
	t, err := time.Parse(time.RFC3339, value)
	if err != nil {
		return nil
	}
	return &metav1.Time{Time: t}
}
