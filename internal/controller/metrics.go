package controller

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// The operator's own metrics, beside controller-runtime's, on its authenticated endpoint.
var (
	// ownedWrites counts pgpilot's writes to the API server by kind and outcome. An idle
	// cluster must leave it still; the benchmark and the tests hold the operator to that.
	ownedWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pgpilot_api_writes_total",
		Help: "Writes pgpilot sent to the Kubernetes API server, by kind and outcome.",
	}, []string{"kind", "outcome"})
	stageOutcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pgpilot_reconcile_stage_outcomes_total",
		Help: "Reconcile stages run, by stage and outcome: ok, waiting, invalid (input refused) or error.",
	}, []string{"stage", "outcome"})
	primaryChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pgpilot_primary_changes_total",
		Help: "Completed changes of a cluster's primary, by kind: failover or switchover.",
	}, []string{"namespace", "cluster", "kind"})
	admissionPolicyFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pgpilot_admission_policy_failures_total",
		Help: "Failed attempts to install pgpilot's ValidatingAdmissionPolicies (Secret references, primary Lease).",
	})
	clustersDesc = prometheus.NewDesc("pgpilot_clusters",
		"PostgresClusters the operator manages, by phase.", []string{"phase"}, nil)
)

func init() {
	metrics.Registry.MustRegister(ownedWrites, stageOutcomes, primaryChanges, admissionPolicyFailures)
}

func recordWrite(kind, outcome string) {
	ownedWrites.WithLabelValues(kind, outcome).Inc()
}

func recordStage(stage, outcome string) { stageOutcomes.WithLabelValues(stage, outcome).Inc() }

func recordPrimaryChange(cluster *pgv1.PostgresCluster, kind string) {
	primaryChanges.WithLabelValues(cluster.Namespace, cluster.Name, kind).Inc()
}

// ClusterPhases counts the PostgresClusters of the manager's cache by phase at each scrape: no
// API request, and no state of its own to keep in step.
type ClusterPhases struct{ Reader client.Reader }

func (c ClusterPhases) Describe(ch chan<- *prometheus.Desc) { ch <- clustersDesc }

func (c ClusterPhases) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	list := &pgv1.PostgresClusterList{}
	if err := c.Reader.List(ctx, list); err != nil {
		return // the cache is not synced yet: no series rather than a wrong count
	}
	counts := map[string]float64{}
	for _, pc := range list.Items {
		counts[string(pc.Status.Phase)]++
	}
	for phase, n := range counts {
		ch <- prometheus.MustNewConstMetric(clustersDesc, prometheus.GaugeValue, n, phase)
	}
}
