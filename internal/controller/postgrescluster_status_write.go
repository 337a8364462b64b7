package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// updateStatus writes the observed status through the status subresource, and only when it
// changed: an idle cluster costs no writes. The patch is conditional on the resourceVersion
// read: a reconcile working from a stale cache must not write (and announce) a transition a
// previous reconcile already wrote; it reports stale instead. reconcileErr is already recorded
// in the scope.
func (r *PostgresClusterReconciler) updateStatus(ctx context.Context, s *scope, reconcileErr error) (stale bool, err error) {
	computeStatus(&s.cluster.Status, summarize(s))
	if equality.Semantic.DeepEqual(s.original.Status, s.cluster.Status) {
		return false, nil
	}
	patch := client.MergeFromWithOptions(s.original, client.MergeFromWithOptimisticLock{})
	switch err := r.Status().Patch(ctx, s.cluster, patch); {
	case apierrors.IsConflict(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("patch status: %w", client.IgnoreNotFound(err))
	}
	recordWrite("PostgresCluster/status", "patched")
	logf.FromContext(ctx).V(1).Info("status updated", "phase", s.cluster.Status.Phase, "reconcileError", reconcileErr)
	r.announceTransitions(s.original, s.cluster)
	return false, nil
}

// announceTransitions emits one Event per condition that changed status, so `kubectl describe`
// tells the story of the cluster.
func (r *PostgresClusterReconciler) announceTransitions(before, after *pgv1.PostgresCluster) {
	for _, c := range after.Status.Conditions {
		old := meta.FindStatusCondition(before.Status.Conditions, c.Type)
		if old != nil && old.Status == c.Status && old.Reason == c.Reason {
			continue
		}
		if old == nil && c.Status == metav1.ConditionFalse && c.Type != pgv1.ConditionMonitoring {
			continue // "not ready", "not degraded" at birth is no news; monitoring that fails is
		}
		eventType := corev1.EventTypeNormal
		if (c.Type == pgv1.ConditionDegraded && c.Status == metav1.ConditionTrue) ||
			(c.Type == pgv1.ConditionContinuousArchiving && c.Status == metav1.ConditionFalse) ||
			(c.Type == pgv1.ConditionMonitoring && c.Status == metav1.ConditionFalse) {
			eventType = corev1.EventTypeWarning
		}
		r.event(after, nil, eventType, c.Reason, "Reconcile", "%s=%s: %s", c.Type, c.Status, c.Message)
	}
}

// announceWrites emits one Event for the owned objects this reconcile created and one for
// those it updated: a new cluster gets one "Created" event, not one per child.
func (r *PostgresClusterReconciler) announceWrites(s *scope) {
	if len(s.created) > 0 {
		r.event(s.cluster, nil, corev1.EventTypeNormal, "Created", "Create", "Created %s", joinCapped(s.created))
	}
	if len(s.updated) > 0 {
		r.event(s.cluster, nil, corev1.EventTypeNormal, "Updated", "Update", "Updated %s", joinCapped(s.updated))
	}
}

// joinCapped lists names within the Event note's 1 KiB limit.
func joinCapped(names []string) string {
	const limit = 900
	out := ""
	for i, n := range names {
		if len(out)+len(n) > limit {
			return out + fmt.Sprintf(" and %d more", len(names)-i)
		}
		if i > 0 {
			out += ", "
		}
		out += n
	}
	return out
}

// event records a Kubernetes Event about the cluster, naming the related object (if any) so
// that events about different children are not merged into one series. A nil recorder (unit
// tests) is silent.
func (r *PostgresClusterReconciler) event(cluster *pgv1.PostgresCluster, related runtime.Object, eventType, reason, action, note string, args ...any) {
	if r.Recorder == nil {
		return
	}
	r.Recorder.Eventf(cluster, related, eventType, reason, action, note, args...)
}
