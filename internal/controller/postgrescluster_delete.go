package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// reconcileDelete handles a cluster that is going away. Everything pgpilot creates carries an
// owner reference, so garbage collection removes it and no finalizer is needed; the volume
// claims follow spec.storage.reclaimPolicy through the StatefulSet's retention policy. All that
// is left is to stop re-creating children and to say so in the status.
func (r *PostgresClusterReconciler) reconcileDelete(ctx context.Context, cluster *pgv1.PostgresCluster) (ctrl.Result, error) {
	r.leases().forget(cluster.UID)
	r.memory().forget(types.NamespacedName{Namespace: cluster.Namespace, Name: cluster.Name})
	if err := r.releaseDatabases(ctx, client.ObjectKeyFromObject(cluster)); err != nil {
		return ctrl.Result{}, err
	}
	if cluster.Status.Phase == pgv1.PhaseDeleting {
		return ctrl.Result{}, nil
	}
	original := cluster.DeepCopy()
	cluster.Status.Phase = pgv1.PhaseDeleting
	if err := r.Status().Patch(ctx, cluster, client.MergeFrom(original)); err != nil {
		return ctrl.Result{}, fmt.Errorf("patch status: %w", client.IgnoreNotFound(err))
	}
	return ctrl.Result{}, nil
}
