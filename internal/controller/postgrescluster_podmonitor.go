package controller

import (
	"context"
	"fmt"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// reasonPodMonitorUnavailable: a PodMonitor is asked for where no Prometheus operator's CRD is.
const reasonPodMonitorUnavailable = "PodMonitorUnavailable"

// PodMonitorsServed says whether the API server serves monitoring.coreos.com/v1 PodMonitors.
// The manager asks once, at start: it must start without the Prometheus operator, and a cache
// cannot watch a kind that is not served. Installing the Prometheus operator later takes a
// restart of pgpilot, which the cluster's Degraded condition says.
func PodMonitorsServed(cfg *rest.Config) (bool, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return false, fmt.Errorf("discovery client: %w", err)
	}
	gv := monitoringv1.SchemeGroupVersion.String()
	resources, err := dc.ServerResourcesForGroupVersion(gv)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discover %s: %w", gv, err)
	}
	for _, r := range resources.APIResources {
		if r.Kind == monitoringv1.PodMonitorsKind {
			return true, nil
		}
	}
	return false, nil
}

// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=podmonitors,verbs=get;list;watch;create;patch;delete

// ensurePodMonitor keeps the cluster's PodMonitor as spec.monitoring.podMonitor asks: applied
// when enabled, deleted when not.
func (r *PostgresClusterReconciler) ensurePodMonitor(ctx context.Context, s *scope) (*stop, error) {
	wanted := s.cluster.Spec.Monitoring.PodMonitor != nil && s.cluster.Spec.Monitoring.PodMonitor.Enabled
	switch {
	case !r.PodMonitors:
		if wanted {
			s.monitoringProblem = &reasonMessage{reasonPodMonitorUnavailable,
				"spec.monitoring.podMonitor is enabled, but the API server served no monitoring.coreos.com/v1 PodMonitor " +
					"when pgpilot started: install the Prometheus operator's CRDs, then restart pgpilot"}
		}
		return nil, nil
	case wanted:
		return nil, ensureOwned(ctx, r, s, pgbuilder.BuildPodMonitor(s.cluster), &monitoringv1.PodMonitor{})
	}
	return nil, r.deletePodMonitor(ctx, s)
}

// deletePodMonitor removes the cluster's PodMonitor, if pgpilot made one (it is in the cache,
// which holds only objects pgpilot labelled, and the cluster controls it).
func (r *PostgresClusterReconciler) deletePodMonitor(ctx context.Context, s *scope) error {
	live := &monitoringv1.PodMonitor{}
	err := r.Get(ctx, client.ObjectKey{Namespace: s.cluster.Namespace, Name: pgbuilder.PodMonitorName(s.cluster)}, live)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get podmonitor: %w", err)
	}
	if !metav1.IsControlledBy(live, s.cluster) {
		return nil
	}
	if err := r.Delete(ctx, live); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete podmonitor %s: %w", live.Name, err)
	}
	recordWrite(monitoringv1.PodMonitorsKind, "deleted")
	logf.FromContext(ctx).Info("deleted owned object", "kind", monitoringv1.PodMonitorsKind, "name", live.Name)
	return nil
}
