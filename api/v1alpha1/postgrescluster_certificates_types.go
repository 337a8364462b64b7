package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// CertificatesSpec is how long the certificates pgpilot issues for the cluster live. pgpilot
// keeps one certificate authority per cluster (Secret <cluster>-ca) and issues from it the
// server certificate of PostgreSQL and the agents, the replication user's client certificate
// and the operator's (Secret <cluster>-tls and <cluster>-ca).
// +kubebuilder:validation:XValidation:rule="!has(self.duration) || duration(self.duration) >= duration('2m')",message="certificates.duration must be at least 2m"
// +kubebuilder:validation:XValidation:rule="!has(self.duration) || !has(self.renewBefore) || duration(self.renewBefore) < duration(self.duration)",message="certificates.renewBefore must be shorter than certificates.duration"
// +kubebuilder:validation:XValidation:rule="!has(self.serverCASecret) || has(self.serverTLSSecret)",message="certificates.serverCASecret needs certificates.serverTLSSecret: it verifies that certificate"
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

	// A kubernetes.io/tls Secret (tls.crt, tls.key, and ca.crt unless serverCASecret is set),
	// for instance from cert-manager, whose certificate PostgreSQL presents instead of one
	// pgpilot issues. It must cover <cluster>-rw (the standbys' host) and <cluster>-rw, -ro and
	// -r.<namespace>.svc. A change of it is loaded without a restart; a Secret that is missing
	// a key, whose key does not match, or whose names fall short is reported in the Degraded
	// condition and not used.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Server TLS Secret",xDescriptors={"urn:alm:descriptor:io.kubernetes:Secret"}
	ServerTLSSecret string `json:"serverTLSSecret,omitempty"`

	// A Secret whose ca.crt verifies serverTLSSecret's certificate (standbys and the
	// application Secret's ca.crt use it); empty: serverTLSSecret's own ca.crt.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Server CA Secret",xDescriptors={"urn:alm:descriptor:io.kubernetes:Secret"}
	ServerCASecret string `json:"serverCASecret,omitempty"`

	// A Secret with a CA (ca.crt and ca.key) that PostgreSQL verifies client certificates
	// with, and from which pgpilot issues the replication user's certificate; empty: the
	// cluster's own CA.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	// +operator-sdk:csv:customresourcedefinitions:type=spec,displayName="Client CA Secret",xDescriptors={"urn:alm:descriptor:io.kubernetes:Secret"}
	ClientCASecret string `json:"clientCASecret,omitempty"`
}
