package builder

import (
	"maps"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// MetricsPortName names the agent's metrics port in the pod template; the PodMonitor scrapes it.
const MetricsPortName = "metrics"

// ClusterMetricLabel is the label every instance metric gets from the PodMonitor: the cluster's
// name, which the alerts of config/prometheus/rules.yaml group by.
const ClusterMetricLabel = "pgpilot_cluster"

// PodMonitorApplyConfiguration is an apply configuration of a monitoring.coreos.com/v1
// PodMonitor. pgpilot takes only the Prometheus operator's API types module, not its client
// module (where generated apply configurations live), so the spec is the typed one.
type PodMonitorApplyConfiguration struct {
	metav1ac.TypeMetaApplyConfiguration    `json:",inline"`
	*metav1ac.ObjectMetaApplyConfiguration `json:"metadata,omitempty"`
	Spec                                   *monitoringv1.PodMonitorSpec `json:"spec,omitempty"`
}

// IsApplyConfiguration marks it for client.Apply.
func (p *PodMonitorApplyConfiguration) IsApplyConfiguration() {}

// GetName is the PodMonitor's name.
func (p *PodMonitorApplyConfiguration) GetName() *string { return p.Name }

// GetNamespace is the PodMonitor's namespace.
func (p *PodMonitorApplyConfiguration) GetNamespace() *string { return p.Namespace }

// WithAnnotations adds annotations, as generated apply configurations do.
func (p *PodMonitorApplyConfiguration) WithAnnotations(entries map[string]string) *PodMonitorApplyConfiguration {
	p.ObjectMetaApplyConfiguration.WithAnnotations(entries)
	return p
}

// PodMonitorName is the name of the cluster's PodMonitor.
func PodMonitorName(c *pgv1.PostgresCluster) string { return c.Name }

// BuildPodMonitor scrapes every instance's metrics port and labels its series with the cluster
// (pgpilot_cluster) and the pod, as the alerts and the dashboard expect. It scrapes over TLS
// with the metrics client certificate, verifying the instances with the cluster's CA.
func BuildPodMonitor(c *pgv1.PostgresCluster) *PodMonitorApplyConfiguration {
	spec := c.Spec.Monitoring.PodMonitor
	labels := map[string]string{}
	if spec != nil {
		maps.Copy(labels, spec.Labels)
	}
	// The user's labels never replace the ones pgpilot's cache selects by.
	maps.Copy(labels, CommonLabels(c))
	endpoint := monitoringv1.PodMetricsEndpoint{
		Port:   ptr.To(MetricsPortName),
		Scheme: ptr.To(monitoringv1.SchemeHTTPS),
		RelabelConfigs: []monitoringv1.RelabelConfig{{
			SourceLabels: []monitoringv1.LabelName{monitoringv1.LabelName("__meta_kubernetes_pod_label_" + sanitizedLabelName(ClusterLabel))},
			TargetLabel:  ClusterMetricLabel,
		}},
	}
	endpoint.TLSConfig = metricsTLSConfig(c)
	if spec != nil && spec.Interval != "" {
		endpoint.Interval = monitoringv1.Duration(spec.Interval)
	}
	p := &PodMonitorApplyConfiguration{
		ObjectMetaApplyConfiguration: metav1ac.ObjectMeta().
			WithName(PodMonitorName(c)).WithNamespace(c.Namespace).
			WithLabels(labels).WithOwnerReferences(ownerReference(c)),
		Spec: &monitoringv1.PodMonitorSpec{
			PodMetricsEndpoints: []monitoringv1.PodMetricsEndpoint{endpoint},
			Selector:            metav1.LabelSelector{MatchLabels: SelectorLabels(c)},
		},
	}
	p.WithKind(monitoringv1.PodMonitorsKind).WithAPIVersion(monitoringv1.SchemeGroupVersion.String())
	return p
}

// metricsTLSConfig presents the metrics client certificate and verifies the instances' API
// certificate (which the metrics port serves) for the name the operator verifies it for.
func metricsTLSConfig(c *pgv1.PostgresCluster) *monitoringv1.SafeTLSConfig {
	key := func(name string) *corev1.SecretKeySelector {
		return &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: MetricsSecretName(c)}, Key: name}
	}
	return &monitoringv1.SafeTLSConfig{
		CA:         monitoringv1.SecretOrConfigMap{Secret: key(corev1.ServiceAccountRootCAKey)},
		Cert:       monitoringv1.SecretOrConfigMap{Secret: key(corev1.TLSCertKey)},
		KeySecret:  key(corev1.TLSPrivateKeyKey),
		ServerName: ptr.To(AgentServerName(c)),
	}
}

// sanitizedLabelName is how Prometheus's Kubernetes discovery turns a label name into part of a
// meta label: every character outside [a-zA-Z0-9_] becomes "_".
func sanitizedLabelName(name string) string {
	out := []byte(name)
	for i, ch := range out {
		if (ch < 'a' || ch > 'z') && (ch < 'A' || ch > 'Z') && (ch < '0' || ch > '9') && ch != '_' {
			out[i] = '_'
		}
	}
	return string(out)
}
