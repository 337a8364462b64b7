package controller

import (
	"context"
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;patch;delete

// ensureNetworkPolicy keeps the cluster's NetworkPolicy as spec.networkPolicy asks: applied
// when enabled, deleted when not.
func (r *PostgresClusterReconciler) ensureNetworkPolicy(ctx context.Context, s *scope) (*stop, error) {
	if s.cluster.Spec.NetworkPolicyEnabled() {
		return nil, ensureOwned(ctx, r, s, pgbuilder.BuildNetworkPolicy(s.cluster, r.OperatorNamespace), &networkingv1.NetworkPolicy{})
	}
	return nil, r.deleteControlled(ctx, s, &networkingv1.NetworkPolicy{}, pgbuilder.NetworkPolicyName(s.cluster), "NetworkPolicy")
}

// deleteControlled removes the cluster's object of that name if pgpilot made it: it is in the
// cache, which holds only objects pgpilot labelled, and the cluster controls it.
func (r *PostgresClusterReconciler) deleteControlled(ctx context.Context, s *scope, live client.Object, name, kind string) error {
	err := r.Get(ctx, client.ObjectKey{Namespace: s.cluster.Namespace, Name: name}, live)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get %s %s: %w", kind, name, err)
	}
	if !metav1.IsControlledBy(live, s.cluster) {
		return nil
	}
	if err := r.Delete(ctx, live); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete %s %s: %w", kind, name, err)
	}
	s.childrenWritten = true
	recordWrite(kind, "deleted")
	logf.FromContext(ctx).Info("deleted owned object", "kind", kind, "name", name)
	return nil
}
