// Package agentclient is how the operator's reconcilers reach the instance agents: where a
// pod's agent listens, whether it serves TLS, the operator's TLS client configuration per
// cluster, and the metrics of every request. The cluster reconciler and the backup reconcilers
// share it; what they ask of the agents stays theirs.
package agentclient

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// Address is where an instance pod's agent listens: its pod IP and the agent port.
func Address(pod *corev1.Pod) string {
	if pod.Status.PodIP == "" {
		return ""
	}
	return net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(agentapi.DefaultAgentPort))
}

// ServesTLS says whether the pod's agent serves HTTPS: a pod of an older operator, not yet
// rolled, serves plain HTTP.
func ServesTLS(pod *corev1.Pod) bool {
	for _, c := range pod.Spec.Containers {
		if c.Name != pgbuilder.PostgresContainerName {
			continue
		}
		return agentapi.ServesTLS(func(name string) (string, bool) {
			for _, e := range c.Env {
				if e.Name == name {
					return e.Value, true
				}
			}
			return "", false
		})
	}
	return false
}

// TLSConfigs keep the operator's TLS client configuration per cluster, made again only when
// its CA Secret changes, so that connections to the agents are reused.
type TLSConfigs struct {
	mu        sync.Mutex
	byCluster map[types.NamespacedName]tlsConfig
}

type tlsConfig struct {
	secretUID     types.UID
	secretVersion string
	config        *tls.Config
}

// ForCluster is the configuration for c from its CA Secret ca.
func (a *TLSConfigs) ForCluster(c *pgv1.PostgresCluster, ca *corev1.Secret) (*tls.Config, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	key := client.ObjectKeyFromObject(c)
	if cached, ok := a.byCluster[key]; ok && cached.secretUID == ca.UID && cached.secretVersion == ca.ResourceVersion && ca.ResourceVersion != "" {
		return cached.config, nil
	}
	config, err := agentapi.ClientTLS(pgbuilder.CATrust(ca), ca.Data[pgbuilder.OperatorCertKey],
		ca.Data[pgbuilder.OperatorKeyKey], pgbuilder.AgentServerName(c))
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", ca.Name, err)
	}
	if a.byCluster == nil {
		a.byCluster = map[types.NamespacedName]tlsConfig{}
	}
	if old, ok := a.byCluster[key]; ok {
		agentapi.ForgetTLS(old.config)
	}
	a.byCluster[key] = tlsConfig{secretUID: ca.UID, secretVersion: ca.ResourceVersion, config: config}
	return config, nil
}

// Load is the configuration for c from its CA Secret as reader has it; nil while there is none
// yet.
func (a *TLSConfigs) Load(ctx context.Context, reader client.Reader, c *pgv1.PostgresCluster) (*tls.Config, error) {
	ca := &corev1.Secret{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: pgbuilder.CASecretName(c)}, ca); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return a.ForCluster(c, ca)
}

// Forget drops the configuration of the cluster key, a deleted cluster's.
func (a *TLSConfigs) Forget(key types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if old, ok := a.byCluster[key]; ok {
		agentapi.ForgetTLS(old.config)
		delete(a.byCluster, key)
	}
}

// Holds says whether a configuration for the cluster key is kept.
func (a *TLSConfigs) Holds(key types.NamespacedName) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.byCluster[key]
	return ok
}

// The request metrics, on the operator's authenticated endpoint beside its others.
var (
	Requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pgpilot_agent_requests_total",
		Help: "Requests to the instance agents, by operation and outcome (ok or error).",
	}, []string{"operation", "outcome"})
	Latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "pgpilot_agent_request_duration_seconds",
		Help:    "Time the instance agents took to answer, by operation.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"operation"})
)

func init() { metrics.Registry.MustRegister(Requests, Latency) }

// Record observes one request to an agent that started at start.
func Record(operation string, start time.Time, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	Requests.WithLabelValues(operation, outcome).Inc()
	Latency.WithLabelValues(operation).Observe(time.Since(start).Seconds())
}
