package builder

import (
	"bytes"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	"github.com/pgpilot/pgpilot-operator/internal/certs"
)

// Names of the certificate Secrets. The CA Secret is the operator's alone (the CA's key and the
// operator's client certificate); the TLS Secret is projected into every instance pod.
func CASecretName(c *pgv1.PostgresCluster) string  { return c.Name + "-ca" }
func TLSSecretName(c *pgv1.PostgresCluster) string { return c.Name + "-tls" }

// MetricsSecretName is the Secret whose holder may scrape the instances' metrics: the metrics
// client certificate, its key and the cluster's CA, under the keys of kubernetes.io/tls.
func MetricsSecretName(c *pgv1.PostgresCluster) string { return c.Name + "-metrics-client" }

// Keys of the CA Secret beside agentapi.TLSCAFile.
const (
	CAKeyKey          = "ca.key"
	OperatorCertKey   = "operator.crt"
	OperatorKeyKey    = "operator.key"
	clusterDomain     = "cluster.local"
	defaultCertLife   = 90 * 24 * time.Hour
	defaultRenewAhead = 7 * 24 * time.Hour
	// CALifetime: the CA outlives many renewals of what it issues; it is rotated (with
	// overlap) when CARotateBefore of it is left, or when the cluster asks (RotateCAAnnotation).
	CALifetime     = 10 * 365 * 24 * time.Hour
	CARotateBefore = 365 * 24 * time.Hour
)

// Keys of the CA Secret during a rotation of the CA, which goes in two steps so that no party
// ever meets a certificate it does not trust: first the next CA is trusted beside the signing
// one (CANextCertKey, with its key), then it signs and the previous one is still trusted
// (CAPreviousCertKey) until every certificate was issued again.
const (
	CANextCertKey     = "ca-next.crt"
	CANextKeyKey      = "ca-next.key"
	CAPreviousCertKey = "ca-previous.crt"
)

// CARotation is the step a CA Secret is at: none, trusting the next CA, or reissuing from it.
type CARotation string

const (
	CARotationNone         CARotation = ""
	CARotationTrusting     CARotation = "trusting the new CA beside the current one"
	CARotationReissuing    CARotation = "issuing the certificates again from the new CA, the old one still trusted"
	CARotatedForAnnotation            = "postgres.pgpilot.io/ca-rotated-for"
)

// CARotationOf says which step of a rotation the CA Secret ca is at.
func CARotationOf(ca *corev1.Secret) CARotation {
	switch {
	case len(ca.Data[CANextCertKey]) > 0:
		return CARotationTrusting
	case len(ca.Data[CAPreviousCertKey]) > 0:
		return CARotationReissuing
	}
	return CARotationNone
}

// CATrust is every CA certificate the cluster's parties trust, from its CA Secret ca: the
// signing CA (agentapi.TLSCAFile), and during a rotation the next or the previous one. Outside
// a rotation it is the signing CA's certificate as it is.
func CATrust(ca *corev1.Secret) []byte {
	bundle := slices.Clone(ca.Data[agentapi.TLSCAFile])
	for _, key := range []string{CANextCertKey, CAPreviousCertKey} {
		if extra := ca.Data[key]; len(extra) > 0 {
			bundle = append(append(bytes.TrimRight(bundle, "\n"), '\n'), extra...)
		}
	}
	return bundle
}

// RenewAtAnnotation on a certificate Secret is when its certificates are due for renewal
// (RFC 3339), so that an idle reconcile decides without parsing them.
const RenewAtAnnotation = "postgres.pgpilot.io/renew-at"

// CertificateDuration and RenewBefore are spec.certificates with pgpilot's defaults.
func CertificateDuration(c *pgv1.PostgresCluster) time.Duration {
	if d := c.Spec.Certificates.Duration; d != nil && d.Duration > 0 {
		return d.Duration
	}
	return defaultCertLife
}

func RenewBefore(c *pgv1.PostgresCluster) time.Duration {
	if d := c.Spec.Certificates.RenewBefore; d != nil && d.Duration > 0 {
		return d.Duration
	}
	return defaultRenewAhead
}

// ServerDNSNames are the names the instances' server certificate covers: the -rw, -ro and -r
// Services in their short, namespaced and cluster-domain forms, and every instance by its
// name under the headless Service.
func ServerDNSNames(c *pgv1.PostgresCluster) []string {
	var names []string
	for _, svc := range []string{ReadWriteServiceName(c), ReadOnlyServiceName(c), AnyServiceName(c)} {
		names = append(names, svc, svc+"."+c.Namespace, serviceHost(c, svc), serviceHost(c, svc)+"."+clusterDomain)
	}
	headless := serviceHost(c, HeadlessServiceName(c))
	return append(names, "*."+headless, "*."+headless+"."+clusterDomain)
}

// AgentServerName is the name the operator verifies an agent's certificate for: any instance
// of the cluster presents the one server certificate, which covers its -r Service.
func AgentServerName(c *pgv1.PostgresCluster) string {
	return serviceHost(c, AnyServiceName(c))
}

// serviceHost is service, one of the cluster's, by the name applications use: service.namespace.svc.
func serviceHost(c *pgv1.PostgresCluster, service string) string {
	return service + "." + c.Namespace + ".svc"
}

// UserServerNames are the names a user's server certificate (spec.certificates.serverTLSSecret)
// must cover: the standbys' host, and every Service in the form applications use.
func UserServerNames(c *pgv1.PostgresCluster) []string {
	return []string{ReadWriteServiceName(c), serviceHost(c, ReadWriteServiceName(c)),
		serviceHost(c, ReadOnlyServiceName(c)), serviceHost(c, AnyServiceName(c))}
}

// Certificates are the PEM material of the cluster's certificate Secrets.
type Certificates struct {
	CACert, CAKey             []byte
	OperatorCert, OperatorKey []byte
	// ServerCert and ServerKey serve the agent API; PostgresCert and PostgresKey PostgreSQL
	// (the same, unless the user supplies PostgreSQL's), ServerCA verifies the latter and
	// ClientCA verifies client certificates at PostgreSQL.
	ServerCert, ServerKey     []byte
	PostgresCert, PostgresKey []byte
	ServerCA, ClientCA        []byte
	ReplicationCert           []byte
	ReplicationKey            []byte
	// CARenewAt and TLSRenewAt are when the CA Secret's and the TLS Secret's certificates are
	// due for renewal.
	CARenewAt, TLSRenewAt time.Time
}

// BuildMetricsSecret holds what a scraper presents to the instances' metrics (client) and
// verifies them with (the cluster's CA); the PodMonitor names its keys.
func BuildMetricsSecret(c *pgv1.PostgresCluster, caCert []byte, client certs.Pair, renewAt time.Time) *corev1.Secret {
	secret := certificateSecret(c, MetricsSecretName(c), renewAt, map[string][]byte{
		corev1.ServiceAccountRootCAKey: caCert,
		corev1.TLSCertKey:              client.CertPEM,
		corev1.TLSPrivateKeyKey:        client.KeyPEM,
	})
	secret.Type = corev1.SecretTypeTLS
	return secret
}

// BuildCASecret holds the CA's key and the operator's client certificate; no pod mounts it.
func BuildCASecret(c *pgv1.PostgresCluster, issued Certificates) *corev1.Secret {
	return certificateSecret(c, CASecretName(c), issued.CARenewAt, map[string][]byte{
		agentapi.TLSCAFile: issued.CACert,
		CAKeyKey:           issued.CAKey,
		OperatorCertKey:    issued.OperatorCert,
		OperatorKeyKey:     issued.OperatorKey,
	})
}

// BuildTLSSecret holds what every instance needs: the CA certificate, the server certificate
// and the replication user's client certificate.
func BuildTLSSecret(c *pgv1.PostgresCluster, issued Certificates) *corev1.Secret {
	return certificateSecret(c, TLSSecretName(c), issued.TLSRenewAt, map[string][]byte{
		agentapi.TLSCAFile:           issued.CACert,
		agentapi.TLSCertFile:         issued.ServerCert,
		agentapi.TLSKeyFile:          issued.ServerKey,
		agentapi.PostgresCertFile:    issued.PostgresCert,
		agentapi.PostgresKeyFile:     issued.PostgresKey,
		agentapi.ServerCAFile:        issued.ServerCA,
		agentapi.ClientCAFile:        issued.ClientCA,
		agentapi.ReplicationCertFile: issued.ReplicationCert,
		agentapi.ReplicationKeyFile:  issued.ReplicationKey,
	})
}

// Typed objects, not apply configurations, for the reason credential Secrets are: pgpilot
// creates them and replaces their content only on renewal, against the version it read.
func certificateSecret(c *pgv1.PostgresCluster, name string, renewAt time.Time, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Namespace:       c.Namespace,
			Labels:          CommonLabels(c),
			Annotations:     map[string]string{RenewAtAnnotation: renewAt.UTC().Format(time.RFC3339)},
			OwnerReferences: []metav1.OwnerReference{ControllerReference(c)},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
}

// SecretRenewAt reads a certificate Secret's RenewAtAnnotation.
func SecretRenewAt(s *corev1.Secret) (time.Time, error) {
	at, err := time.Parse(time.RFC3339, s.Annotations[RenewAtAnnotation])
	if err != nil {
		return time.Time{}, fmt.Errorf("secret %s: annotation %s: %w", s.Name, RenewAtAnnotation, err)
	}
	return at, nil
}
