package controller

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/internal/version"
)

// observation is what one reconcile saw, the only input of the status.
type observation struct {
	generation     int64
	operator       string // the version reconciling
	desired        int32
	instances      int32
	readyInstances int32
	primary        string
	primaryReady   bool
	// primaryWritable: the primary's agent says PostgreSQL is not in recovery.
	primaryWritable bool
	// streamingReplicas is how many replicas' agents say they stream from the primary.
	streamingReplicas int32
	// instancesStatus is what the agents said, nil when they were not asked.
	instancesStatus []pgv1.InstanceStatus
	waiting         *reasonMessage
	failure         *reasonMessage
}

func observe(s *scope) observation {
	o := observation{
		generation: s.cluster.Generation,
		operator:   version.Version,
		desired:    s.cluster.Spec.Instances,
		primary:    s.primary,
		waiting:    s.waiting,
		failure:    s.failure,
	}
	if s.statefulSet != nil {
		o.instances = s.statefulSet.Status.Replicas
		o.readyInstances = s.statefulSet.Status.ReadyReplicas
	} else {
		// The chain stopped before the StatefulSet stage; keep what was last observed.
		o.instances, o.readyInstances = s.cluster.Status.Instances, s.cluster.Status.ReadyInstances
	}
	if o.primary == "" && s.failure != nil {
		o.primary = s.cluster.Status.CurrentPrimary
	}
	for i := range s.pods {
		if s.pods[i].Name == o.primary {
			o.primaryReady = podReady(&s.pods[i])
		}
	}
	if s.agents != nil {
		o.instancesStatus = s.instances
		for name, st := range s.agents {
			switch {
			case name == o.primary && st.Role == postgres.RolePrimary:
				o.primaryWritable = true
			case name != o.primary && st.Role == postgres.RoleReplica && st.Streaming:
				o.streamingReplicas++
			}
		}
	}
	return o
}

// computeStatus turns an observation into the cluster's status. Conditions keep their
// lastTransitionTime unless their status flips (meta.SetStatusCondition).
func computeStatus(status *pgv1.PostgresClusterStatus, o observation) {
	status.Instances = o.instances
	status.ReadyInstances = o.readyInstances
	status.CurrentPrimary = o.primary
	status.OperatorVersion = o.operator
	if o.instancesStatus != nil {
		status.InstancesStatus = o.instancesStatus
	}
	if o.failure == nil {
		status.ObservedGeneration = o.generation
	}
	setDegradedCondition(status, o)
	setReadyCondition(status, o)
	setProgressingCondition(status, o)
	status.Phase = phase(o)
}

// allReady: the primary accepts writes and every replica is ready and streams from it.
func allReady(o observation) bool {
	return o.primaryReady && o.primaryWritable && o.instances == o.desired && o.readyInstances == o.desired &&
		o.streamingReplicas == o.desired-1
}

func setDegradedCondition(status *pgv1.PostgresClusterStatus, o observation) {
	c := metav1.Condition{Type: pgv1.ConditionDegraded, Status: metav1.ConditionFalse,
		Reason: "AsExpected", Message: "no problem found", ObservedGeneration: o.generation}
	switch {
	case o.failure != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, o.failure.reason, o.failure.message
	case o.primary != "" && !o.primaryReady:
		c.Status, c.Reason = metav1.ConditionTrue, "PrimaryNotReady"
		c.Message = fmt.Sprintf("primary %s does not accept connections", o.primary)
	}
	meta.SetStatusCondition(&status.Conditions, c)
}

func setReadyCondition(status *pgv1.PostgresClusterStatus, o observation) {
	c := metav1.Condition{Type: pgv1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: o.generation}
	switch {
	case allReady(o):
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

func setProgressingCondition(status *pgv1.PostgresClusterStatus, o observation) {
	c := metav1.Condition{Type: pgv1.ConditionProgressing, Status: metav1.ConditionTrue, ObservedGeneration: o.generation}
	switch {
	case o.failure != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, o.failure.reason, "stopped: "+o.failure.message
	case o.waiting != nil:
		// A wait even on a ready cluster (a rolling restart) is progress the user should see.
		c.Reason, c.Message = o.waiting.reason, o.waiting.message
	case allReady(o):
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, "Reconciled", "the cluster matches its spec"
	default:
		c.Reason = "Scaling"
		c.Message = fmt.Sprintf("%d of %d instances ready", o.readyInstances, o.desired)
	}
	meta.SetStatusCondition(&status.Conditions, c)
}

func phase(o observation) pgv1.Phase {
	switch {
	case o.failure != nil || (o.primary != "" && !o.primaryReady):
		return pgv1.PhaseDegraded
	case allReady(o):
		return pgv1.PhaseReady
	case o.primary == "" && o.instances == 0:
		return pgv1.PhasePending
	case o.primary == "":
		return pgv1.PhaseBootstrapping
	default:
		return pgv1.PhaseScaling
	}
}
