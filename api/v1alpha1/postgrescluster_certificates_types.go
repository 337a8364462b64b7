package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// CertificatesSpec is how long the certificates pgpilot issues for the cluster live. pgpilot
// keeps one certificate authority per cluster (Secret <cluster>-ca) and issues from it the
// server certificate of PostgreSQL and the agents, the replication user's client certificate
// and the operator's (Secret <cluster>-tls and <cluster>-ca).
// +kubebuilder:validation:XValidation:rule="!has(self.duration) || duration(self.duration) >= duration('2m')",message="certificates.duration must be at least 2m"
// +kubebuilder:validation:XValidation:rule="!has(self.duration) || !has(self.renewBefore) || duration(self.renewBefore) < duration(self.duration)",message="certificates.renewBefore must be shorter than certificates.duration"
type CertificatesSpec struct {
	// How long each server and client certificate is valid. The certificate authority is
	// valid for ten years.
	// +kubebuilder:default="2160h"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Certificate Duration",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	Duration *metav1.Duration `json:"duration,omitempty"`

	// How long before its expiry a certificate is replaced. PostgreSQL and the agents load the
	// new one without a restart.
	// +kubebuilder:default="168h"
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Renew Before",xDescriptors={"urn:alm:descriptor:com.tectonic.ui:text"}
	RenewBefore *metav1.Duration `json:"renewBefore,omitempty"`
}
