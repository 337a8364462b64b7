package controller

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/certs"
)

// userTLS is what spec.certificates names, read and checked; a zero field is not set.
type userTLS struct {
	// server is PostgreSQL's certificate and serverCA the CA that verifies it.
	server   certs.Pair
	serverCA []byte
	// clientCA (with its key) verifies client certificates and issues the replication user's.
	clientCA certs.Pair
}

// tlsChoice is the authorities the instances' TLS Secret is to carry.
type tlsChoice struct {
	userTLS
	// clusterCA is every CA of the cluster trusted (pgbuilder.CATrust), and clientCAFile what
	// PostgreSQL verifies client certificates with: the user's client CA, or clusterCA.
	clusterCA, clientCAFile []byte
}

// over fills what the user did not supply with the cluster's CA (signing, the one that issues,
// and trust, the ones trusted). The user's server CA is trusted beside the cluster's, not
// instead: while the kubelet updates one pod after another, a standby still trusts the
// primary's certificate, old or new.
func (u userTLS) over(signing certs.Pair, trust []byte) tlsChoice {
	choice := tlsChoice{userTLS: u, clusterCA: trust, clientCAFile: u.clientCA.CertPEM}
	choice.serverCA = trust
	if u.serverCA != nil {
		choice.serverCA = append(append(bytes.TrimSpace(slices.Clone(u.serverCA)), '\n'), trust...)
	}
	if choice.clientCA.CertPEM == nil {
		choice.clientCA, choice.clientCAFile = signing, trust
	}
	return choice
}

// current says whether the TLS Secret already carries these choices: every key, the agents'
// and the replication user's certificates issued by the CA that issues now (signing), the
// authorities chosen, and PostgreSQL's certificate the user's (or the agents' own when the
// user supplies none).
func (t tlsChoice) current(secret *corev1.Secret, signing []byte) bool {
	d := secret.Data
	postgresCert, postgresKey := d[agentapi.TLSCertFile], d[agentapi.TLSKeyFile]
	if t.server.CertPEM != nil {
		postgresCert, postgresKey = t.server.CertPEM, t.server.KeyPEM
	}
	return missingKeys(secret, agentapi.TLSFiles...) == "" &&
		bytes.Equal(d[agentapi.TLSCAFile], t.clusterCA) &&
		bytes.Equal(d[agentapi.ServerCAFile], t.serverCA) &&
		bytes.Equal(d[agentapi.ClientCAFile], t.clientCAFile) &&
		bytes.Equal(d[agentapi.PostgresCertFile], postgresCert) &&
		bytes.Equal(d[agentapi.PostgresKeyFile], postgresKey) &&
		certs.IssuedBy(d[agentapi.TLSCertFile], signing) &&
		certs.IssuedBy(d[agentapi.ReplicationCertFile], t.clientCA.CertPEM)
}

// userCertificates reads and checks the Secrets spec.certificates names. They are the user's,
// outside the label-scoped cache, so they are read from the API server; problem says what is
// wrong with them, in the words of the spec.
func (r *PostgresClusterReconciler) userCertificates(ctx context.Context, c *pgv1.PostgresCluster, now time.Time) (userTLS, string, error) {
	spec := c.Spec.Certificates
	var u userTLS
	if spec.ServerTLSSecret != "" {
		server, problem, err := r.userSecret(ctx, c, "serverTLSSecret", spec.ServerTLSSecret, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
		if problem != "" || err != nil {
			return u, problem, err
		}
		u.server = certs.Pair{CertPEM: server.Data[corev1.TLSCertKey], KeyPEM: server.Data[corev1.TLSPrivateKeyKey]}
		caField, caSecret := "serverTLSSecret", server
		if spec.ServerCASecret != "" {
			caField = "serverCASecret"
			if caSecret, problem, err = r.userSecret(ctx, c, caField, spec.ServerCASecret, agentapi.TLSCAFile); problem != "" || err != nil {
				return u, problem, err
			}
		} else if len(server.Data[agentapi.TLSCAFile]) == 0 {
			return u, fmt.Sprintf("spec.certificates.serverTLSSecret: Secret %q has no %q key to verify its certificate with; add it or set serverCASecret",
				server.Name, agentapi.TLSCAFile), nil
		}
		u.serverCA = caSecret.Data[agentapi.TLSCAFile]
		if err := certs.CheckServer(u.server, u.serverCA, pgbuilder.UserServerNames(c), now); err != nil {
			return u, fmt.Sprintf("spec.certificates.serverTLSSecret: Secret %q (verified with the ca.crt of spec.certificates.%s): %v",
				server.Name, caField, err), nil
		}
	}
	if spec.ClientCASecret != "" {
		secret, problem, err := r.userSecret(ctx, c, "clientCASecret", spec.ClientCASecret, agentapi.TLSCAFile, pgbuilder.CAKeyKey)
		if problem != "" || err != nil {
			return u, problem, err
		}
		u.clientCA = certs.Pair{CertPEM: secret.Data[agentapi.TLSCAFile], KeyPEM: secret.Data[pgbuilder.CAKeyKey]}
		if cert, _, err := u.clientCA.Parse(); err != nil || !cert.IsCA {
			if err == nil {
				err = fmt.Errorf("the certificate is not a CA")
			}
			return u, fmt.Sprintf("spec.certificates.clientCASecret: Secret %q: %v", secret.Name, err), nil
		}
	}
	return u, "", nil
}

// userSecret reads the user's Secret named in spec.certificates.field, and says which of keys
// it lacks.
func (r *PostgresClusterReconciler) userSecret(ctx context.Context, c *pgv1.PostgresCluster, field, name string, keys ...string) (*corev1.Secret, string, error) {
	secret := &corev1.Secret{}
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, secret); {
	case apierrors.IsNotFound(err):
		return nil, fmt.Sprintf("spec.certificates.%s: Secret %q does not exist", field, name), nil
	case err != nil:
		return nil, "", fmt.Errorf("get secret %s: %w", name, err)
	}
	if missing := missingKeys(secret, keys...); missing != "" {
		return nil, fmt.Sprintf("spec.certificates.%s: Secret %q has no %s key", field, name, missing), nil
	}
	return secret, "", nil
}
