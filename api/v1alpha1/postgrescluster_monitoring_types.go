package v1alpha1

// MonitoringSpec is how the instances' metrics (each agent's port named metrics) are collected.
type MonitoringSpec struct {
	// A monitoring.coreos.com/v1 PodMonitor named after the cluster, managed by pgpilot, that
	// scrapes every instance, for a Prometheus operator running in the cluster. Without the
	// Prometheus operator's CRDs, the cluster is Degraded (PodMonitorUnavailable) and runs on.
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Pod Monitor",order=1
	PodMonitor *PodMonitorSpec `json:"podMonitor,omitempty"`
}

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
