package controller

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	"github.com/pgpilot/pgpilot-operator/internal/ha"
	"github.com/pgpilot/pgpilot-operator/internal/version"
)

// health is how the instances are, from what was observed and the primary decided: what the
// status reports and what a restart waits for.
type health struct {
	desired        int32
	instances      int32
	readyInstances int32
	primary        string
	primaryReady   bool
	// primaryWritable: the primary's agent says PostgreSQL is not in recovery.
	primaryWritable bool
	// streamingReplicas is how many replicas' agents say they stream from the primary.
	streamingReplicas int32
	// unschedulable says why the scheduler cannot place an instance pod (an unknown storage
	// class, contradictory scheduling constraints, no room), "" when every pod is placed.
	unschedulable string
}

func assessHealth(s *scope) health {
	h := health{desired: s.cluster.Spec.Instances, primary: s.primary}
	if s.statefulSet != nil {
		h.instances = s.statefulSet.Status.Replicas
		h.readyInstances = s.statefulSet.Status.ReadyReplicas
	} else {
		// The chain stopped before the StatefulSet stage; keep what was last observed.
		h.instances, h.readyInstances = s.cluster.Status.Instances, s.cluster.Status.ReadyInstances
	}
	if h.primary == "" && s.failure != nil {
		h.primary = s.cluster.Status.CurrentPrimary
	}
	if pod := s.observed.Pod(h.primary); pod != nil {
		h.primaryReady = ha.PodReady(pod)
	}
	h.unschedulable = unschedulable(s.observed.Pods)
	for name, report := range s.observed.Reports {
		switch {
		case name == h.primary && report.Role == agentapi.RolePrimary:
			h.primaryWritable = true
		case name != h.primary && report.Role == agentapi.RoleReplica && report.Streaming:
			h.streamingReplicas++
		}
	}
	return h
}

// allReady: the primary accepts writes and every replica is ready and streams from it.
func (h health) allReady() bool {
	return h.primaryReady && h.primaryWritable && h.instances == h.desired && h.readyInstances == h.desired &&
		h.streamingReplicas == h.desired-1
}

// summary is what one reconcile saw and decided, the only input of the status.
type summary struct {
	health
	generation int64
	operator   string // the version reconciling
	// instancesStatus is what the agents said, nil when they were not asked.
	instancesStatus []pgv1.InstanceStatus
	// credentialsVersions, once announced; nil keeps what the status has.
	credentialsVersions map[string]string
	// targetPrimary and switchoverLSN: a running switchover; with failoverReason, a failover.
	targetPrimary, switchoverLSN, failoverReason, switchoverRequest, switchoverReason string
	primaryReplacedAt                                                                 *metav1.Time
	// timeline is the primary's, 0 when its agent did not say.
	timeline int64
	// now stamps the primary and target changes.
	now     metav1.Time
	waiting *reasonMessage
	failure *reasonMessage
	// backupConfigured: spec.backup is set; archive is the primary's report on archiving, nil
	// when it did not answer; backupProblem what is wrong with the repository's Secrets.
	backupConfigured bool
	archive          *agentapi.ArchiveStatus
	backupProblem    *reasonMessage
	monitoring       monitoringSummary
	// certificateProblem: spec.certificates' Secrets cannot be used.
	certificateProblem *reasonMessage
	// switchoverProblem: the switchover annotation cannot be carried out.
	switchoverProblem *reasonMessage
	versions          versionSummary
	majorUpgrade      *pgv1.MajorUpgradeStatus
}

func summarize(s *scope) summary {
	sum := summary{
		health:     assessHealth(s),
		generation: s.cluster.Generation,
		operator:   version.Version,
		waiting:    s.waiting,
		failure:    s.failure,

		targetPrimary:     s.targetPrimary,
		switchoverLSN:     s.switchoverLSN,
		failoverReason:    s.failoverReason,
		switchoverRequest: s.switchoverRequest,
		switchoverReason:  s.switchoverReason,
		primaryReplacedAt: s.primaryReplacedAt,
		majorUpgrade:      s.majorUpgrade,
		now:               metav1.Now(),
	}
	if report := s.observed.Reports[sum.primary]; report != nil && report.Role == agentapi.RolePrimary {
		sum.timeline, sum.archive = report.Timeline, report.Archive
	}
	sum.backupConfigured, sum.backupProblem = s.cluster.Spec.Backup != nil, s.backupProblem
	sum.monitoring = summarizeMonitoring(s)
	sum.certificateProblem, sum.switchoverProblem = s.certificateProblem, s.switchoverProblem
	sum.versions = summarizeVersions(s, sum.primary)
	// Before there is a primary, the instances are still being created: their agents' answers
	// would only churn the status.
	if sum.primary != "" {
		sum.instancesStatus = instancesStatus(s.observed)
	}
	if s.credentialsAnnounced {
		sum.credentialsVersions = s.credentialsVersions
	}
	return sum
}

// instancesStatus is each instance as its agent reported it, and its lag as the primary sees it.
func instancesStatus(o *observed) []pgv1.InstanceStatus {
	if o.Reports == nil {
		return nil
	}
	statuses := make([]pgv1.InstanceStatus, 0, len(o.Pods))
	for i := range o.Pods {
		st := pgv1.InstanceStatus{Name: o.Pods[i].Name, Ready: ha.PodReady(&o.Pods[i]), Error: o.Failures[o.Pods[i].Name]}
		if own, ok := o.Reports[st.Name]; ok {
			st.AgentVersion, st.PostgresVersion = agentapi.VersionOf(own), own.ServerVersion
			st.Role, st.Timeline, st.Streaming = own.Role, own.Timeline, own.Streaming
			st.PendingRestart = own.PendingRestart
			st.Fenced = own.FencedReason
			if own.Rejoined != nil {
				st.RejoinedAt = own.Rejoined.At
			}
			st.LSN = own.CurrentLSN
			if own.Role == agentapi.RoleReplica {
				st.LSN = own.ReplayLSN
			}
		}
		for _, other := range o.Reports {
			for _, replica := range other.Replicas {
				if replica.ApplicationName == st.Name {
					lag := replica.LagBytes
					st.LagBytes = &lag
					st.ReplayLag = replayLag(replica.ReplayLagSeconds)
					st.SyncState = replica.SyncState
				}
			}
		}
		statuses = append(statuses, st)
	}
	return statuses
}

// replayLag is a replica's replay lag in milliseconds, as status shows it: finer would write
// the status on every observation while the primary writes.
func replayLag(seconds *float64) string {
	if seconds == nil {
		return ""
	}
	return (time.Duration(*seconds*1000) * time.Millisecond).String()
}

// computeStatus turns an observation into the cluster's status. Conditions keep their
// lastTransitionTime unless their status flips (meta.SetStatusCondition).
func computeStatus(status *pgv1.PostgresClusterStatus, o summary) {
	status.Instances = o.instances
	status.ReadyInstances = o.readyInstances
	// A reconcile that stopped before deciding keeps the primary the status names: it is the
	// record failover starts from.
	if o.primary != "" && o.primary != status.CurrentPrimary {
		status.CurrentPrimary, status.CurrentPrimaryTimestamp = o.primary, &o.now
	}
	if o.timeline != 0 {
		status.Timeline = o.timeline
	}
	if o.targetPrimary != status.TargetPrimary {
		status.TargetPrimaryTimestamp = nil
		if o.targetPrimary != "" {
			status.TargetPrimaryTimestamp = &o.now
		}
	}
	status.TargetPrimary, status.SwitchoverLSN, status.FailoverReason = o.targetPrimary, o.switchoverLSN, o.failoverReason
	status.SwitchoverRequest, status.SwitchoverReason = o.switchoverRequest, o.switchoverReason
	status.PrimaryReplacedAt = o.primaryReplacedAt
	status.OperatorVersion = o.operator
	if o.instancesStatus != nil {
		status.InstancesStatus = o.instancesStatus
	}
	if o.credentialsVersions != nil {
		status.CredentialsVersions = o.credentialsVersions
	}
	if o.failure == nil {
		status.ObservedGeneration = o.generation
	}
	setArchiving(status, o)
	setVersions(status, o.versions, o.generation)
	setMajorUpgrade(status, o.majorUpgrade, o.generation)
	setMonitoring(status, o.monitoring, o.generation)
	setDegradedCondition(status, o)
	setReadyCondition(status, o)
	setProgressingCondition(status, o)
	status.Phase = phase(o)
}

func setDegradedCondition(status *pgv1.PostgresClusterStatus, o summary) {
	c := metav1.Condition{Type: pgv1.ConditionDegraded, Status: metav1.ConditionFalse,
		Reason: "AsExpected", Message: "no problem found", ObservedGeneration: o.generation}
	switch {
	case o.failure != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, o.failure.reason, o.failure.message
	case o.versions.mismatch != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, o.versions.mismatch.reason, o.versions.mismatch.message
	case o.certificateProblem != nil:
		c.Status, c.Reason = metav1.ConditionTrue, o.certificateProblem.reason
		c.Message = o.certificateProblem.message + "; the instances keep the certificates they have"
	case o.primary != "" && !o.primaryReady:
		c.Status, c.Reason = metav1.ConditionTrue, "PrimaryNotReady"
		c.Message = fmt.Sprintf("primary %s does not accept connections", o.primary)
	case o.switchoverProblem != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, o.switchoverProblem.reason, o.switchoverProblem.message
	case o.unschedulable != "":
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, "InstancesUnschedulable", o.unschedulable
	case archivingDegraded(status) != nil:
		archiving := archivingDegraded(status)
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, archiving.Reason, "WAL archiving: "+archiving.Message
	}
	meta.SetStatusCondition(&status.Conditions, c)
}

func setReadyCondition(status *pgv1.PostgresClusterStatus, o summary) {
	c := metav1.Condition{Type: pgv1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: o.generation}
	switch {
	case o.allReady():
		c.Status, c.Reason = metav1.ConditionTrue, "ClusterReady"
		c.Message = fmt.Sprintf("primary %s accepts connections and all %d instances are ready", o.primary, o.desired)
	case o.primary == "":
		c.Reason, c.Message = "NoPrimary", "the cluster has no primary yet"
	case !o.primaryReady:
		c.Reason, c.Message = "PrimaryNotReady", fmt.Sprintf("primary %s does not accept connections", o.primary)
	case !o.primaryWritable:
		c.Reason, c.Message = "PrimaryNotConfirmed", fmt.Sprintf("the agent of %s has not confirmed it is a writable primary", o.primary)
	case o.readyInstances != o.desired || o.instances != o.desired:
		c.Reason = "InstancesNotReady"
		c.Message = fmt.Sprintf("%d of %d instances ready", o.readyInstances, o.desired)
	default:
		c.Reason = "ReplicasNotStreaming"
		c.Message = fmt.Sprintf("%d of %d replicas stream from the primary", o.streamingReplicas, o.desired-1)
	}
	meta.SetStatusCondition(&status.Conditions, c)
}

func setProgressingCondition(status *pgv1.PostgresClusterStatus, o summary) {
	c := metav1.Condition{Type: pgv1.ConditionProgressing, Status: metav1.ConditionTrue, ObservedGeneration: o.generation}
	switch {
	case o.failure != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, o.failure.reason, "stopped: "+o.failure.message
	case o.waiting != nil:
		// A wait even on a ready cluster (a rolling restart) is progress the user should see.
		c.Reason, c.Message = o.waiting.reason, o.waiting.message
	case o.allReady():
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, "Reconciled", "the cluster matches its spec"
	default:
		c.Reason = "Scaling"
		c.Message = fmt.Sprintf("%d of %d instances ready", o.readyInstances, o.desired)
	}
	meta.SetStatusCondition(&status.Conditions, c)
}

func phase(o summary) pgv1.Phase {
	switch {
	// What the HA lane does first: it goes on whatever the children's lane stopped for.
	case o.targetPrimary != "" && o.failoverReason != "":
		return pgv1.PhaseFailingOver
	case o.majorUpgrade.Running():
		return pgv1.PhaseUpgradingMajor
	case o.targetPrimary != "":
		return pgv1.PhaseSwitchingOver
	case o.failure != nil || o.switchoverProblem != nil:
		return pgv1.PhaseDegraded
	case o.waiting != nil && (o.waiting.reason == reasonRollingUpdate || o.waiting.reason == reasonUpdateWaiting ||
		o.waiting.reason == reasonPrimaryReplacing):
		// Decided on what was seen before this reconcile replaced a pod: never Ready.
		return pgv1.PhaseUpgrading
	case o.primary != "" && !o.primaryReady:
		return pgv1.PhaseDegraded
	case o.allReady():
		return pgv1.PhaseReady
	case o.primary == "" && o.instances == 0:
		return pgv1.PhasePending
	case o.primary == "":
		return pgv1.PhaseBootstrapping
	default:
		return pgv1.PhaseScaling
	}
}

// unschedulable is the scheduler's word on the first instance pod it cannot place.
func unschedulable(pods []corev1.Pod) string {
	for i := range pods {
		for _, c := range pods[i].Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return fmt.Sprintf("pod %s cannot be scheduled: %s", pods[i].Name, c.Message)
			}
		}
	}
	return ""
}
