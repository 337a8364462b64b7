package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// ownedWrites counts pgpilot's writes to the API server by kind and outcome. An idle cluster
// must leave it still; the benchmark and the tests hold the operator to that.
var ownedWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "pgpilot_api_writes_total",
	Help: "Writes pgpilot sent to the Kubernetes API server, by kind and outcome.",
}, []string{"kind", "outcome"})

func init() {
	metrics.Registry.MustRegister(ownedWrites)
}

func recordWrite(kind, outcome string) {
	ownedWrites.WithLabelValues(kind, outcome).Inc()
}
