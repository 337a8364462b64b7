package controller

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=patch

// replaceForLargerVolumes handles a grown spec.storage.size. A StatefulSet's volume claim
// templates are immutable, so pgpilot expands the existing claims itself, then deletes the
// StatefulSet with orphan propagation: the pods and their data keep running, and the
// StatefulSet created on the next reconcile (with the larger template) adopts them.
func (r *PostgresClusterReconciler) replaceForLargerVolumes(ctx context.Context, s *scope) (bool, error) {
	live := &appsv1.StatefulSet{}
	err := r.Get(ctx, client.ObjectKey{Namespace: s.cluster.Namespace, Name: pgbuilder.StatefulSetName(s.cluster)}, live)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("get statefulset: %w", err)
	}
	current, ok := claimSize(live)
	if !ok || current.Cmp(s.cluster.Spec.Storage.Size) >= 0 {
		return false, nil
	}
	want := s.cluster.Spec.Storage.Size.String()
	for ordinal := range int(max(s.cluster.Spec.Instances, live.Status.Replicas, ptr.Deref(live.Spec.Replicas, 0))) {
		if err := r.expandClaim(ctx, s, claimName(live, ordinal), want); err != nil {
			return false, err
		}
	}
	logf.FromContext(ctx).Info("replacing statefulset for larger volumes", "from", current.String(), "to", want)
	orphan := metav1.DeletePropagationOrphan
	if err := r.Delete(ctx, live, &client.DeleteOptions{
		PropagationPolicy: &orphan,
		Preconditions:     &metav1.Preconditions{UID: &live.UID},
	}); client.IgnoreNotFound(err) != nil {
		return false, fmt.Errorf("delete statefulset for new volume claim template: %w", err)
	}
	recordWrite("StatefulSet", "replaced")
	r.event(s.cluster, live, corev1.EventTypeNormal, "VolumesGrown", "Resize",
		"Volume claims grown to %s; StatefulSet %s replaced, its pods kept running", want, live.Name)
	return true, nil
}

// expandClaim raises one claim's storage request. A claim that does not exist yet is fine;
// a claim its storage class cannot expand is reported and left as it is — never shrunk or
// replaced, so no data is at risk.
func (r *PostgresClusterReconciler) expandClaim(ctx context.Context, s *scope, name, size string) error {
	pvc := &corev1.PersistentVolumeClaim{}
	pvc.Name, pvc.Namespace = name, s.cluster.Namespace
	patch := fmt.Appendf(nil, `{"spec":{"resources":{"requests":{"storage":%q}}}}`, size)
	err := r.Patch(ctx, pvc, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(pgbuilder.FieldOwner))
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsInvalid(err) || apierrors.IsForbidden(err):
		r.event(s.cluster, pvc, corev1.EventTypeWarning, "VolumeExpansionFailed", "Resize",
			"Cannot grow claim %s to %s: %v", name, size, err)
		return nil
	case err != nil:
		return fmt.Errorf("expand claim %s: %w", name, err)
	}
	recordWrite("PersistentVolumeClaim", "expanded")
	return nil
}

func claimSize(sts *appsv1.StatefulSet) (q resource.Quantity, ok bool) {
	for _, t := range sts.Spec.VolumeClaimTemplates {
		if t.Name == pgbuilder.DataVolumeName {
			q, ok = t.Spec.Resources.Requests[corev1.ResourceStorage]
			return q, ok
		}
	}
	return q, false
}

// claimName is the name the StatefulSet controller gives an instance's data claim.
func claimName(sts *appsv1.StatefulSet, ordinal int) string {
	return fmt.Sprintf("%s-%s-%d", pgbuilder.DataVolumeName, sts.Name, ordinal)
}
