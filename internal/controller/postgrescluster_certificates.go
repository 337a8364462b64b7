package controller

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/certs"
)

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update

// reasonCertificatesInvalid: a certificate Secret, the cluster's or the user's, cannot be used.
const reasonCertificatesInvalid = "CertificatesInvalid"

// ensureCertificates keeps the cluster's CA and the certificates it issues: created once,
// renewed when due (RenewAtAnnotation), each renewal an Event, and the CA rotated with overlap
// (postgrescluster_carotation.go). The instances load renewed certificates without a restart;
// the operator's client configuration follows its Secret.
func (r *PostgresClusterReconciler) ensureCertificates(ctx context.Context, s *scope) (*stop, error) {
	now := r.now()
	ca, st, err := r.ensureCASecret(ctx, s, now)
	if st != nil || err != nil {
		return st, err
	}
	server, st, err := r.ensureTLSSecret(ctx, s, ca, now)
	if st != nil || err != nil {
		return st, err
	}
	metrics, st, err := r.ensureMetricsSecret(ctx, s, ca, now)
	if st != nil || err != nil {
		return st, err
	}
	for _, secret := range []*corev1.Secret{ca, server, metrics} {
		if at, err := pgbuilder.SecretRenewAt(secret); err == nil && (s.renewAt.IsZero() || at.Before(s.renewAt)) {
			s.renewAt = at
		}
	}
	config, err := r.memory().agentTLS.ForCluster(s.cluster, ca)
	if err != nil {
		return invalidUntilFixed(reasonCertificatesInvalid, err.Error()), nil
	}
	s.agentTLS, s.caCert = config, server.Data[agentapi.ServerCAFile]
	s.caSecret, s.tlsSecret = ca, server
	return nil, nil
}

func (r *PostgresClusterReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// ensureCASecret creates the CA with the operator's client certificate, starts a rotation of
// the CA when one is due, and renews the operator's certificate. The CA itself is replaced only
// by a rotation: every certificate in use chains to it.
func (r *PostgresClusterReconciler) ensureCASecret(ctx context.Context, s *scope, now time.Time) (*corev1.Secret, *stop, error) {
	c := s.cluster
	existing, err := r.certificateSecret(ctx, c, pgbuilder.CASecretName(c))
	if err != nil || existing == nil {
		if err == nil {
			existing, err = r.createCASecret(ctx, s, now)
		}
		return existing, nil, err
	}
	if missing := missingKeys(existing, agentapi.TLSCAFile, pgbuilder.CAKeyKey, pgbuilder.OperatorCertKey, pgbuilder.OperatorKeyKey); missing != "" {
		return nil, invalidUntilFixed(reasonCertificatesInvalid, fmt.Sprintf("Secret %q has no %s; delete it for pgpilot to issue a new CA", existing.Name, missing)), nil
	}
	renew := dueForRenewal(c, existing, now)
	if why := caRotationDue(c, existing, renew, now); why != "" {
		return r.startCARotation(ctx, s, existing, why, now)
	}
	if !renew {
		return existing, nil, nil
	}
	desired, err := withOperatorCertificate(c, existing, now)
	if err != nil {
		return nil, invalidUntilFixed(reasonCertificatesInvalid, fmt.Sprintf("Secret %q: %v", existing.Name, err)), nil
	}
	written, err := r.writeCertificateSecret(ctx, s, existing, desired, "the operator's client certificate")
	return written, nil, err
}

// withOperatorCertificate is the CA Secret ca with the operator's client certificate issued
// again from the CA it holds.
func withOperatorCertificate(c *pgv1.PostgresCluster, ca *corev1.Secret, now time.Time) (*corev1.Secret, error) {
	operator, renewAt, err := issueClient(c, signingCA(ca), agentapi.OperatorCommonName, now)
	if err != nil {
		return nil, err
	}
	desired := &corev1.Secret{Data: maps.Clone(ca.Data), ObjectMeta: metav1.ObjectMeta{Annotations: maps.Clone(ca.Annotations)}}
	if desired.Annotations == nil {
		desired.Annotations = map[string]string{}
	}
	desired.Annotations[pgbuilder.RenewAtAnnotation] = renewAt.UTC().Format(time.RFC3339)
	desired.Data[pgbuilder.OperatorCertKey], desired.Data[pgbuilder.OperatorKeyKey] = operator.CertPEM, operator.KeyPEM
	return desired, nil
}

func (r *PostgresClusterReconciler) createCASecret(ctx context.Context, s *scope, now time.Time) (*corev1.Secret, error) {
	c := s.cluster
	authority, err := certs.NewAuthority(caCommonName(c), now, pgbuilder.CALifetime)
	if err != nil {
		return nil, err
	}
	operator, renewAt, err := issueClient(c, authority, agentapi.OperatorCommonName, now)
	if err != nil {
		return nil, err
	}
	secret := pgbuilder.BuildCASecret(c, pgbuilder.Certificates{CACert: authority.CertPEM,
		CAKey: authority.KeyPEM, OperatorCert: operator.CertPEM, OperatorKey: operator.KeyPEM, CARenewAt: renewAt})
	if request := c.Annotations[pgv1.RotateCAAnnotation]; request != "" {
		secret.Annotations[pgbuilder.CARotatedForAnnotation] = request // a new CA answers it
	}
	return r.createSecret(ctx, s, secret)
}

// ensureMetricsSecret keeps the metrics client certificate, issued again when due or when the
// CA that issued it changed. Whoever may read the Secret may scrape: Kubernetes RBAC on Secrets
// is the authorization, and the instances ask for nothing else.
func (r *PostgresClusterReconciler) ensureMetricsSecret(ctx context.Context, s *scope, ca *corev1.Secret, now time.Time) (*corev1.Secret, *stop, error) {
	c := s.cluster
	existing, err := r.certificateSecret(ctx, c, pgbuilder.MetricsSecretName(c))
	if err != nil {
		return nil, nil, err
	}
	caCert, authority := pgbuilder.CATrust(ca), signingCA(ca)
	if existing != nil && bytes.Equal(existing.Data[corev1.ServiceAccountRootCAKey], caCert) &&
		certs.IssuedBy(existing.Data[corev1.TLSCertKey], authority.CertPEM) && !dueForRenewal(c, existing, now) {
		return existing, nil, nil
	}
	scraper, renewAt, err := issueClient(c, authority, agentapi.MetricsCommonName, now)
	if err != nil {
		return nil, invalidUntilFixed(reasonCertificatesInvalid, fmt.Sprintf("issue the metrics client certificate: %v", err)), nil
	}
	written, err := r.writeCertificateSecret(ctx, s, existing, pgbuilder.BuildMetricsSecret(c, caCert, scraper, renewAt),
		"the metrics client certificate")
	return written, nil, err
}

// ensureTLSSecret keeps what the instances need: the agent API's certificate and the
// replication user's (issued again when due, or when the CA that issued them changed), and
// PostgreSQL's: pgpilot's own, or the user's (spec.certificates). A user's certificates that
// cannot be used are reported and the instances keep what they have.
func (r *PostgresClusterReconciler) ensureTLSSecret(ctx context.Context, s *scope, ca *corev1.Secret, now time.Time) (*corev1.Secret, *stop, error) {
	c := s.cluster
	existing, err := r.certificateSecret(ctx, c, pgbuilder.TLSSecretName(c))
	if err != nil {
		return nil, nil, err
	}
	user, problem, err := r.userCertificates(ctx, c, now)
	if err != nil {
		return nil, nil, err
	}
	if problem != "" {
		s.certificateProblem = &reasonMessage{reasonCertificatesInvalid, problem}
		if existing != nil {
			return existing, nil, nil
		}
		user = userTLS{} // a new cluster starts with pgpilot's own and says why
	}
	clusterCA := signingCA(ca)
	want := user.over(clusterCA, pgbuilder.CATrust(ca))
	if existing != nil && want.current(existing, clusterCA.CertPEM) && !dueForRenewal(c, existing, now) {
		return existing, nil, nil
	}
	issued, err := issueInstanceCertificates(c, clusterCA, want.clientCA, now)
	if err != nil {
		return nil, invalidUntilFixed(reasonCertificatesInvalid, fmt.Sprintf("issue the instances' certificates: %v", err)), nil
	}
	issued.PostgresCert, issued.PostgresKey = issued.ServerCert, issued.ServerKey
	if user.server.CertPEM != nil {
		issued.PostgresCert, issued.PostgresKey = user.server.CertPEM, user.server.KeyPEM
	}
	issued.CACert, issued.ServerCA, issued.ClientCA = want.clusterCA, want.serverCA, want.clientCAFile
	written, err := r.writeCertificateSecret(ctx, s, existing, pgbuilder.BuildTLSSecret(c, issued), "the instances' certificates")
	if err != nil {
		return nil, nil, err
	}
	if existing != nil {
		s.certificatesRenewed = written.ResourceVersion
	}
	return written, nil, nil
}

// caCommonName is the subject of the cluster's first CA; a rotated one adds when it was made.
func caCommonName(c *pgv1.PostgresCluster) string { return c.Namespace + "/" + c.Name + " pgpilot CA" }

// signingCA is the CA the cluster's certificates are issued from, in its CA Secret ca.
func signingCA(ca *corev1.Secret) certs.Pair {
	return certs.Pair{CertPEM: ca.Data[agentapi.TLSCAFile], KeyPEM: ca.Data[pgbuilder.CAKeyKey]}
}

// issueInstanceCertificates issues the agents' server certificate for every name the instances
// answer to from the cluster's CA, and the replication user's client certificate from the
// client CA.
func issueInstanceCertificates(c *pgv1.PostgresCluster, clusterCA, clientCA certs.Pair, now time.Time) (pgbuilder.Certificates, error) {
	server, err := certs.Issue(clusterCA, certs.Request{CommonName: pgbuilder.ReadWriteServiceName(c),
		DNSNames: pgbuilder.ServerDNSNames(c), Usage: certs.Server, Validity: pgbuilder.CertificateDuration(c)}, now)
	if err != nil {
		return pgbuilder.Certificates{}, err
	}
	replication, renewAt, err := issueClient(c, clientCA, agentapi.DefaultReplicationUser, now)
	if err != nil {
		return pgbuilder.Certificates{}, err
	}
	return pgbuilder.Certificates{ServerCert: server.CertPEM, ServerKey: server.KeyPEM,
		ReplicationCert: replication.CertPEM, ReplicationKey: replication.KeyPEM, TLSRenewAt: renewAt}, nil
}

// issueClient issues a client certificate for commonName and says when it is due for renewal.
func issueClient(c *pgv1.PostgresCluster, authority certs.Pair, commonName string, now time.Time) (certs.Pair, time.Time, error) {
	pair, err := certs.Issue(authority, certs.Request{CommonName: commonName, Usage: certs.Client,
		Validity: pgbuilder.CertificateDuration(c)}, now)
	if err != nil {
		return certs.Pair{}, time.Time{}, err
	}
	cert, err := certs.ParseCertificate(pair.CertPEM)
	if err != nil {
		return certs.Pair{}, time.Time{}, err
	}
	return pair, certs.RenewAt(cert, pgbuilder.RenewBefore(c)), nil
}

// dueForRenewal: the Secret's certificates are due, it does not say when they are, or they
// live longer than spec.certificates now asks (a shortened duration takes effect at once).
func dueForRenewal(c *pgv1.PostgresCluster, secret *corev1.Secret, now time.Time) bool {
	at, err := pgbuilder.SecretRenewAt(secret)
	latest := now.Add(pgbuilder.CertificateDuration(c) - pgbuilder.RenewBefore(c) + time.Minute)
	return err != nil || !now.Before(at) || at.After(latest)
}

func missingKeys(secret *corev1.Secret, keys ...string) string {
	var missing []string
	for _, key := range keys {
		if len(secret.Data[key]) == 0 {
			missing = append(missing, fmt.Sprintf("%q", key))
		}
	}
	return strings.Join(missing, ", ")
}

// certificateSecret reads one of the cluster's certificate Secrets from the cache; nil when
// there is none. A Secret of that name that the cluster does not own is not used.
func (r *PostgresClusterReconciler) certificateSecret(ctx context.Context, c *pgv1.PostgresCluster, name string) (*corev1.Secret, error) {
	secret := &corev1.Secret{}
	switch err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, secret); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get secret %s: %w", name, err)
	}
	if !slices.ContainsFunc(secret.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == c.UID }) {
		return nil, fmt.Errorf("secret %s exists and is not the cluster's", name)
	}
	return secret, nil
}

// createSecret creates a certificate Secret and returns it; when the cache was merely stale,
// the one that exists wins and is read from the API server.
func (r *PostgresClusterReconciler) createSecret(ctx context.Context, s *scope, secret *corev1.Secret) (*corev1.Secret, error) {
	switch err := r.Create(ctx, secret, client.FieldOwner(pgbuilder.FieldOwner)); {
	case apierrors.IsAlreadyExists(err):
		existing := &corev1.Secret{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(secret), existing); err != nil {
			return nil, fmt.Errorf("get secret %s: %w", secret.Name, err)
		}
		return existing, nil
	case err != nil:
		return nil, fmt.Errorf("create secret %s: %w", secret.Name, err)
	}
	recordWrite("Secret", "created")
	s.created = append(s.created, "Secret "+secret.Name)
	return secret, nil
}

// writeCertificateSecret creates desired when there is no existing Secret, and otherwise
// renews existing with desired's data and annotations, against the version read; what names
// the certificates for the renewal's Event.
func (r *PostgresClusterReconciler) writeCertificateSecret(ctx context.Context, s *scope, existing, desired *corev1.Secret, what string) (*corev1.Secret, error) {
	if existing == nil {
		return r.createSecret(ctx, s, desired)
	}
	renewed := existing.DeepCopy()
	renewed.Data, renewed.Annotations = desired.Data, desired.Annotations
	written, err := r.updateSecret(ctx, renewed)
	if err != nil {
		return nil, err
	}
	r.Recorder.Eventf(s.cluster, nil, corev1.EventTypeNormal, "CertificatesRenewed", "Renew",
		"renewed %s (Secret %s); the instances load them without a restart", what, renewed.Name)
	return written, nil
}

// updateSecret writes a certificate Secret as changed from the version read (its
// resourceVersion): a stale cache fails with a conflict instead of undoing a newer step.
func (r *PostgresClusterReconciler) updateSecret(ctx context.Context, secret *corev1.Secret) (*corev1.Secret, error) {
	if err := r.Update(ctx, secret, client.FieldOwner(pgbuilder.FieldOwner)); err != nil {
		return nil, fmt.Errorf("update secret %s: %w", secret.Name, err)
	}
	recordWrite("Secret", "updated")
	return secret, nil
}

// loadAgentTLS gives the HA lane the operator's client certificate when the children's lane
// stopped before it loaded it: failover must reach the agents whatever else is wrong. Without
// one (a new cluster, a damaged CA Secret) the agents that serve TLS are not asked (observe).
func (r *PostgresClusterReconciler) loadAgentTLS(ctx context.Context, s *scope) (*stop, error) {
	if s.agentTLS != nil {
		return nil, nil
	}
	config, err := r.memory().agentTLS.Load(ctx, r.Client, s.cluster)
	if err != nil {
		logf.FromContext(ctx).Info("the operator's client certificate is unusable; agents serving TLS are not asked", "error", err.Error())
		return nil, nil
	}
	s.agentTLS = config
	return nil, nil
}
