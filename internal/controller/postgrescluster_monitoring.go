package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// Reasons of the Monitoring condition.
const (
	reasonMetricsExported = "MetricsExported"
	// reasonPodMonitorUnavailable: a PodMonitor is asked for where no Prometheus operator's CRD is.
	reasonPodMonitorUnavailable = "PodMonitorUnavailable"
	reasonCustomQueriesMissing  = "CustomQueriesMissing"
	reasonCustomQueriesInvalid  = "CustomQueriesInvalid"
	reasonCustomQueryFailed     = "CustomQueryFailed"
	reasonWaitingForInstances   = "WaitingForInstances"
)

// PodMonitorsServed says whether the API server serves monitoring.coreos.com/v1 PodMonitors.
// The manager asks once, at start: it must start without the Prometheus operator, and a cache
// cannot watch a kind that is not served. Installing the Prometheus operator later takes a
// restart of pgpilot, which the cluster's Monitoring condition says.
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

// ensureMonitoring keeps the PodMonitor as asked and checks the custom queries' sources; what
// cannot be done goes into the Monitoring condition, never stops the reconcile.
func (r *PostgresClusterReconciler) ensureMonitoring(ctx context.Context, s *scope) (*stop, error) {
	if err := r.ensurePodMonitor(ctx, s); err != nil {
		return nil, err
	}
	return nil, r.checkCustomQuerySources(ctx, s)
}

// checkCustomQuerySources notes a custom queries' ConfigMap or Secret (or key) that does not
// exist: its volume source is optional, so the instances run without it and would not say so.
func (r *PostgresClusterReconciler) checkCustomQuerySources(ctx context.Context, s *scope) error {
	for i, src := range s.cluster.Spec.Monitoring.CustomQueries {
		field := fmt.Sprintf("spec.monitoring.customQueries[%d]", i)
		var problem string
		var err error
		switch {
		case src.ConfigMap != nil:
			problem, err = r.configMapProblem(ctx, s.cluster.Namespace, field+".configMap", src.ConfigMap.Name, src.ConfigMap.Key)
		case src.Secret != nil:
			problem, err = r.secretProblem(ctx, s.cluster.Namespace, field+".secret", src.Secret.Name, src.Secret.Key)
		}
		if err != nil {
			return err
		}
		if problem != "" && s.monitoringProblem == nil {
			s.monitoringProblem = &reasonMessage{reasonCustomQueriesMissing, problem}
		}
	}
	return nil
}

// ensurePodMonitor keeps the cluster's PodMonitor as spec.monitoring.podMonitor asks: applied
// when enabled, deleted when not.
func (r *PostgresClusterReconciler) ensurePodMonitor(ctx context.Context, s *scope) error {
	wanted := s.cluster.Spec.Monitoring.PodMonitorEnabled()
	switch {
	case !r.PodMonitors:
		if wanted {
			s.monitoringProblem = &reasonMessage{reasonPodMonitorUnavailable,
				"spec.monitoring.podMonitor is enabled, but the API server served no monitoring.coreos.com/v1 PodMonitor " +
					"when pgpilot started: install the Prometheus operator's CRDs, then restart pgpilot"}
		}
		return nil
	case wanted && s.childrenUnchanged:
		return nil
	case wanted:
		return ensureOwned(ctx, r, s, pgbuilder.BuildPodMonitor(s.cluster), &monitoringv1.PodMonitor{})
	}
	return r.deleteControlled(ctx, s, &monitoringv1.PodMonitor{}, pgbuilder.PodMonitorName(s.cluster), monitoringv1.PodMonitorsKind)
}

// monitoringSummary is what the Monitoring condition is made from.
type monitoringSummary struct {
	// configured: spec.monitoring asks for a PodMonitor or custom queries.
	configured, customQueries bool
	// problem is what spec.monitoring asks that cannot be done.
	problem *reasonMessage
	// metrics are the instances' reports on their custom queries, by pod; nil when no agent
	// answered this time.
	metrics map[string]*agentapi.MetricsStatus
}

func summarizeMonitoring(s *scope) monitoringSummary {
	m := s.cluster.Spec.Monitoring
	sum := monitoringSummary{customQueries: len(m.CustomQueries) > 0, problem: s.monitoringProblem}
	sum.configured = sum.customQueries || m.PodMonitorEnabled()
	for pod, report := range s.observed.Reports {
		if report != nil && report.Metrics != nil {
			if sum.metrics == nil {
				sum.metrics = map[string]*agentapi.MetricsStatus{}
			}
			sum.metrics[pod] = report.Metrics
		}
	}
	return sum
}

// setMonitoring writes the Monitoring condition; a cluster without spec.monitoring has none.
// Failing queries are those of each instance's last scrape.
func setMonitoring(status *pgv1.PostgresClusterStatus, o monitoringSummary, generation int64) {
	if !o.configured {
		meta.RemoveStatusCondition(&status.Conditions, pgv1.ConditionMonitoring)
		return
	}
	c := metav1.Condition{Type: pgv1.ConditionMonitoring, Status: metav1.ConditionFalse, ObservedGeneration: generation}
	var invalid, failing []string
	for _, pod := range slices.Sorted(maps.Keys(o.metrics)) {
		if m := o.metrics[pod]; m.LoadError != "" {
			invalid = append(invalid, pod+": "+m.LoadError)
		} else if len(m.FailingQueries) > 0 {
			failing = append(failing, pod+": "+strings.Join(m.FailingQueries, ", "))
		}
	}
	switch {
	case o.problem != nil:
		c.Reason, c.Message = o.problem.reason, o.problem.message
	case len(invalid) > 0:
		c.Reason = reasonCustomQueriesInvalid
		c.Message = "custom queries not loaded (those loaded before still run): " + strings.Join(invalid, "; ")
	case len(failing) > 0:
		c.Reason, c.Message = reasonCustomQueryFailed, "custom queries failing in the last scrape: "+strings.Join(failing, "; ")
	case o.customQueries && o.metrics == nil:
		if old := meta.FindStatusCondition(status.Conditions, pgv1.ConditionMonitoring); old != nil && slices.Contains(
			[]string{reasonMetricsExported, reasonCustomQueriesInvalid, reasonCustomQueryFailed}, old.Reason) {
			return // no instance answered: nothing new to say about what they reported
		}
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, reasonWaitingForInstances, "no instance has reported on its metrics yet"
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, reasonMetricsExported, "every instance exports its metrics as spec.monitoring asks"
	}
	meta.SetStatusCondition(&status.Conditions, c)
}
