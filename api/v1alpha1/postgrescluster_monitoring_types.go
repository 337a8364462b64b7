package v1alpha1

import corev1 "k8s.io/api/core/v1"

// MonitoringSpec is how the instances' metrics (each agent's port named metrics) are collected.
type MonitoringSpec struct {
	// A monitoring.coreos.com/v1 PodMonitor named after the cluster, managed by pgpilot, that
	// scrapes every instance, for a Prometheus operator running in the cluster. Without the
	// Prometheus operator's CRDs, the Monitoring condition says so (PodMonitorUnavailable).
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Pod Monitor",order=1
	PodMonitor *PodMonitorSpec `json:"podMonitor,omitempty"`

	// Queries whose results each instance exports beside the built-in metrics, in
	// postgres_exporter's YAML shape (a metric prefix, its query and a usage per column: GAUGE,
	// COUNTER, LABEL or DISCARD; master: true for the primary only; target_databases). A change
	// of the ConfigMap's or Secret's content is picked up without a restart (adding or removing
	// a source rolls the instances); a query that fails sets pgpilot_query_error and the
	// Monitoring condition, and never stops the other metrics.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Custom Queries",order=2
	CustomQueries []CustomQueriesSource `json:"customQueries,omitempty"`
}

// PodMonitorEnabled says whether pgpilot is to keep a PodMonitor for the cluster.
func (m MonitoringSpec) PodMonitorEnabled() bool { return m.PodMonitor != nil && m.PodMonitor.Enabled }

// PodMonitorSpec is the PodMonitor pgpilot manages for a cluster.
type PodMonitorSpec struct {
	// Whether pgpilot manages the PodMonitor; turning it off deletes it.
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Enabled",xDescriptors="urn:alm:descriptor:com.tectonic.ui:booleanSwitch"
	Enabled bool `json:"enabled"`

	// Interval between scrapes, in Prometheus's duration format; Prometheus's own when empty.
	// +kubebuilder:validation:Pattern=`^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$`
	// +optional
	Interval string `json:"interval,omitempty"`

	// Labels added to the PodMonitor, for a Prometheus whose podMonitorSelector chooses by label.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
}

// CustomQueriesSource is a ConfigMap or a Secret key holding queries in postgres_exporter's
// YAML shape.
// +kubebuilder:validation:XValidation:rule="has(self.configMap) != has(self.secret)",message="name exactly one of configMap and secret"
type CustomQueriesSource struct {
	// A key of a ConfigMap in the cluster's namespace.
	// +optional
	ConfigMap *corev1.ConfigMapKeySelector `json:"configMap,omitempty"`
	// A key of a Secret in the cluster's namespace, for queries that should not be readable by
	// whoever can read ConfigMaps.
	// +optional
	Secret *corev1.SecretKeySelector `json:"secret,omitempty"`
}

// ConditionMonitoring is True when every instance exports its metrics as spec.monitoring asks
// (a cluster without spec.monitoring has none).
const ConditionMonitoring = "Monitoring"
