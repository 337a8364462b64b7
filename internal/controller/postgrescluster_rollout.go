package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/ha"
)

// SwitchoverForUpdate is status.switchoverReason when pgpilot moves the primary off an
// outdated pod: no annotation stands behind it, so none can cancel it.
const SwitchoverForUpdate = "the primary's pod runs an outdated template"

// Reasons of the update stage's waits; the phase is Upgrading meanwhile.
const (
	reasonRollingUpdate    = "RollingUpdate"
	reasonUpdateWaiting    = "UpdateWaiting"
	reasonPrimaryReplacing = "PrimaryReplacing"
)

// primaryReplaceHold is how long failover waits for a primary whose pod pgpilot replaces in
// place; after it, the primary counts as failed like any other.
const primaryReplaceHold = 2 * time.Minute

// +kubebuilder:rbac:groups="",resources=pods,verbs=delete

// rollOutTemplate replaces the instance pods whose template is outdated (a new image, a new
// agent): the StatefulSet's OnDelete strategy leaves the order to pgpilot. One replica at a
// time, only while the cluster is healthy; the primary last, after a switchover to an updated
// replica, so that its replacement costs a switchover's few seconds instead of a failover.
func (r *PostgresClusterReconciler) rollOutTemplate(ctx context.Context, s *scope) (*stop, error) {
	outdated := outdatedPods(s.statefulSet, s.observed.Pods)
	// A pod on its way out still looks ready, and its agent still answers, for a moment: the
	// next one goes only once it is gone and its replacement is back.
	leaving, leavingOutdated := terminatingPod(s.statefulSet, s.observed.Pods)
	if leavingOutdated {
		return waitFor(reasonRollingUpdate, fmt.Sprintf("replacing %s with the updated pod template", leaving)), nil
	}
	if len(outdated) == 0 {
		return waitForReplacement(s), nil
	}
	if leaving != "" {
		return waitFor(reasonUpdateWaiting, fmt.Sprintf("%d instance(s) run an outdated pod template; pgpilot replaces them once %s has terminated",
			len(outdated), leaving)), nil
	}
	// A single instance has no redundancy to protect, and an instance of an operator without
	// the agent (0.1.0) never reports healthy: it is replaced at once.
	if len(s.observed.Pods) > 1 && !assessHealth(s).allReady() {
		return waitFor(reasonUpdateWaiting, fmt.Sprintf("%d instance(s) run an outdated pod template; pgpilot replaces them only while the cluster is healthy",
			len(outdated))), nil
	}
	next := outdated[0]
	if next == s.primary && len(s.observed.Pods) > 1 && s.cluster.Spec.PrimaryUpdateMethod != pgv1.PrimaryUpdateRestart {
		return r.switchoverForUpdate(s, outdated)
	}
	if next == s.primary && s.cluster.Status.PrimaryReplacedAt == nil {
		// Recorded in the status before the pod goes: a failover must find it when the pod
		// disappears, even if this reconcile's status write loses a race.
		now := metav1.Now()
		s.primaryReplacedAt = &now
		return &stop{reasonMessage: reasonMessage{reasonPrimaryReplacing, fmt.Sprintf("replacing the primary %s in place", next)},
			retry: true, after: time.Second}, nil
	}
	pod := s.observed.Pod(next)
	if err := r.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil {
		return nil, fmt.Errorf("delete outdated pod %s: %w", next, err)
	}
	recordWrite("Pod", "deleted")
	r.event(s.cluster, pod, corev1.EventTypeNormal, "InstanceUpdating", "Update",
		"Replacing %s, whose pod template is outdated (%d instance(s) left)", next, len(outdated)-1)
	return waitFor(reasonRollingUpdate, fmt.Sprintf("replacing %s with the updated pod template", next)), nil
}

// waitForReplacement keeps the phase Upgrading after the last outdated pod went, until the
// cluster is whole again (its replacement back, ready and streaming): the roll is not over
// before.
func waitForReplacement(s *scope) *stop {
	if s.cluster.Status.Phase != pgv1.PhaseUpgrading || assessHealth(s).allReady() {
		return nil
	}
	if int32(len(s.observed.Pods)) < s.cluster.Spec.Instances {
		return waitFor(reasonRollingUpdate, "waiting for the replaced pod to be created")
	}
	for i := range s.observed.Pods {
		if !ha.PodReady(&s.observed.Pods[i]) {
			return waitFor(reasonRollingUpdate, fmt.Sprintf("waiting for %s, replaced with the updated pod template, to be ready", s.observed.Pods[i].Name))
		}
	}
	// Nothing in the API changes when it starts streaming: look again soon.
	return &stop{reasonMessage: reasonMessage{reasonRollingUpdate, "waiting for the replaced instance to stream from the primary"},
		retry: true, after: settlingInterval}
}

// switchoverForUpdate moves the primary to the updated replica with the most WAL; the
// switchover stage carries it out, and the old primary is replaced afterwards as a replica.
func (r *PostgresClusterReconciler) switchoverForUpdate(s *scope, outdated []string) (*stop, error) {
	updated := &ha.Observed{Reports: map[string]*agentapi.Status{}}
	for i := range s.observed.Pods {
		if name := s.observed.Pods[i].Name; !slices.Contains(outdated, name) {
			updated.Pods = append(updated.Pods, s.observed.Pods[i])
			updated.Reports[name] = s.observed.Reports[name]
		}
	}
	target := ha.ChooseCandidate(updated, s.primary)
	if target == "" {
		return waitFor(reasonUpdateWaiting, "the primary's pod template is outdated; waiting for an updated replica to switch over to"), nil
	}
	s.targetPrimary, s.switchoverReason = target, SwitchoverForUpdate
	r.event(s.cluster, s.observed.Pod(target), corev1.EventTypeNormal, "SwitchoverStarted", "Switchover",
		"Switching over from %s to %s: %s", s.primary, target, SwitchoverForUpdate)
	return switchingOver(fmt.Sprintf("switching over from %s to %s to update it", s.primary, target)), nil
}

// terminatingPod is an instance pod being deleted, if any, and whether it runs an outdated
// template (pgpilot or someone replaces it).
func terminatingPod(sts *appsv1.StatefulSet, pods []corev1.Pod) (name string, outdated bool) {
	for i := range pods {
		if !pods[i].DeletionTimestamp.IsZero() {
			revision := ""
			if sts != nil {
				revision = sts.Status.UpdateRevision
			}
			return pods[i].Name, revision != "" && pods[i].Labels[appsv1.ControllerRevisionHashLabelKey] != revision
		}
	}
	return "", false
}

// outdatedPods are the instance pods not on the StatefulSet's update revision, replicas
// first (highest ordinal first, as the StatefulSet would), the primary-labelled last.
func outdatedPods(sts *appsv1.StatefulSet, pods []corev1.Pod) []string {
	if sts == nil || sts.Status.UpdateRevision == "" {
		return nil
	}
	var outdated []string
	primary := ""
	for i := range pods {
		if pods[i].Labels[appsv1.ControllerRevisionHashLabelKey] == sts.Status.UpdateRevision || !pods[i].DeletionTimestamp.IsZero() {
			continue
		}
		if pods[i].Labels[pgbuilder.RoleLabel] == pgbuilder.RolePrimary {
			primary = pods[i].Name
			continue
		}
		outdated = append(outdated, pods[i].Name)
	}
	slices.SortFunc(outdated, func(a, b string) int { return ha.CompareNames(b, a) })
	if primary != "" {
		outdated = append(outdated, primary)
	}
	return outdated
}
