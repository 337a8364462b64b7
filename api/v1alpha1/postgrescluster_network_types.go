package v1alpha1

import networkingv1 "k8s.io/api/networking/v1"

// NetworkPolicySpec is the NetworkPolicy pgpilot keeps for a cluster's instances when asked.
type NetworkPolicySpec struct {
	// Whether pgpilot keeps a NetworkPolicy named after the cluster that admits to the instances
	// only PostgreSQL from clients and the cluster's own instances, the agent API from the
	// operator's namespace, and the metrics from monitoring; turning it off deletes it. It takes
	// a network plugin that enforces NetworkPolicies; without one it changes nothing.
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Enabled",xDescriptors="urn:alm:descriptor:com.tectonic.ui:booleanSwitch"
	Enabled bool `json:"enabled"`

	// Who may connect to PostgreSQL (5432) besides the cluster's own instances; anyone when
	// empty.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	Clients []networkingv1.NetworkPolicyPeer `json:"clients,omitempty"`

	// Who may scrape the metrics port (9187); anyone when empty (the metrics still ask for the
	// cluster's metrics client certificate).
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	Monitoring []networkingv1.NetworkPolicyPeer `json:"monitoring,omitempty"`
}

// NetworkPolicyEnabled says whether pgpilot is to keep a NetworkPolicy for the cluster.
func (s *PostgresClusterSpec) NetworkPolicyEnabled() bool {
	return s.NetworkPolicy != nil && s.NetworkPolicy.Enabled
}
