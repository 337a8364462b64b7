package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// podsByClusterIndex indexes the cached pods by their cluster label, so listing one cluster's
// pods is a lookup, not a scan of every pod the cache holds.
const podsByClusterIndex = "pgpilot.cluster"

func indexPodsByCluster(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &corev1.Pod{}, podsByClusterIndex, func(obj client.Object) []string {
		if name, ok := obj.GetLabels()[pgbuilder.ClusterLabel]; ok {
			return []string{name}
		}
		return nil
	})
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch

// waitForBootstrap lets the stages after it run once the cluster has a primary: a pod already
// labelled primary, or the first instance accepting connections for the first time.
func (r *PostgresClusterReconciler) waitForBootstrap(ctx context.Context, s *scope) (ctrl.Result, error) {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(s.cluster.Namespace),
		client.MatchingFields{podsByClusterIndex: s.cluster.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("list pods: %w", err)
	}
	s.pods = pods.Items
	s.primary = electPrimary(s)
	if s.primary == "" {
		s.wait("Bootstrapping", fmt.Sprintf("waiting for %s to initialise PostgreSQL and accept connections",
			pgbuilder.InstancePodName(s.cluster, 0)))
		return r.notYet(), nil
	}
	return ctrl.Result{}, nil
}

// electPrimary keeps the pod already labelled primary; before there is one, the first instance
// becomes primary once it is ready. (Real election by the instance agent replaces the second rule.)
func electPrimary(s *scope) string {
	for i := range s.pods {
		if s.pods[i].Labels[pgbuilder.RoleLabel] == pgbuilder.RolePrimary {
			return s.pods[i].Name
		}
	}
	first := pgbuilder.InstancePodName(s.cluster, 0)
	for i := range s.pods {
		if s.pods[i].Name == first && podReady(&s.pods[i]) {
			return first
		}
	}
	return ""
}

// confirmPrimary settles who is primary — the instance whose PostgreSQL says so, when the
// agents answered — then labels it role=primary and every other instance role=replica, so the
// -rw and -ro Services route to them. Two instances claiming to be primary stop everything
// until fencing exists: relabelling either could send writes to the wrong one.
func (r *PostgresClusterReconciler) confirmPrimary(ctx context.Context, s *scope) (ctrl.Result, error) {
	var claims []string
	for name, status := range s.agents {
		if status.Role == postgres.RolePrimary {
			claims = append(claims, name)
		}
	}
	slices.Sort(claims)
	switch len(claims) {
	case 0:
	case 1:
		s.primary = claims[0]
	default:
		s.fail("MultiplePrimaries", fmt.Sprintf("instances %s all claim to be primary; pgpilot changes nothing until this is resolved",
			strings.Join(claims, ", ")))
		return ctrl.Result{}, nil
	}
	for i := range s.pods {
		pod := &s.pods[i]
		role := pgbuilder.RoleReplica
		if pod.Name == s.primary {
			role = pgbuilder.RolePrimary
		}
		if pod.Labels[pgbuilder.RoleLabel] == role {
			continue
		}
		// A merge patch, not an apply: the pod belongs to the StatefulSet, and a vanished pod must
		// fail with NotFound rather than be re-created from a partial object.
		patch := client.MergeFrom(pod.DeepCopy())
		if pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		pod.Labels[pgbuilder.RoleLabel] = role
		if err := r.Patch(ctx, pod, patch, client.FieldOwner(pgbuilder.FieldOwner)); err != nil {
			return ctrl.Result{}, fmt.Errorf("label pod %s %s: %w", pod.Name, role, err)
		}
		recordWrite("Pod", "labelled")
		if role == pgbuilder.RolePrimary {
			r.event(s.cluster, pod, corev1.EventTypeNormal, "PrimaryElected", "Label", "Pod %s is the primary", pod.Name)
		}
	}
	return ctrl.Result{}, nil
}

func podReady(pod *corev1.Pod) bool {
	if !pod.DeletionTimestamp.IsZero() {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
