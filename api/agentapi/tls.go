package agentapi

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Files of the TLS directory (Config.TLSDir): the keys of the cluster's TLS Secret, projected.
const (
	// TLSCAFile is the cluster's certificate authority; at the agent API it verifies the
	// operator's client certificate.
	TLSCAFile = "ca.crt"
	// TLSCertFile and TLSKeyFile are the agent API's server certificate, from the cluster's CA.
	TLSCertFile = "tls.crt"
	TLSKeyFile  = "tls.key"
	// PostgresCertFile and PostgresKeyFile are PostgreSQL's server certificate: the same as
	// the API's, or the user's (spec.certificates.serverTLSSecret).
	PostgresCertFile = "server.crt"
	PostgresKeyFile  = "server.key"
	// ServerCAFile verifies PostgreSQL's server certificate (a standby's sslrootcert).
	ServerCAFile = "server-ca.crt"
	// ClientCAFile verifies client certificates at PostgreSQL (ssl_ca_file).
	ClientCAFile = "client-ca.crt"
	// ReplicationCertFile and ReplicationKeyFile log the replication user in.
	ReplicationCertFile = "replication.crt"
	ReplicationKeyFile  = "replication.key"
)

// TLSFiles are every file of the TLS directory.
var TLSFiles = []string{TLSCAFile, TLSCertFile, TLSKeyFile, PostgresCertFile, PostgresKeyFile, ServerCAFile,
	ClientCAFile, ReplicationCertFile, ReplicationKeyFile}

// CertificatesDigest identifies the content of the TLS directory's files, given by name (the
// TLS Secret's data, or the files an agent loaded): the same files, the same digest.
func CertificatesDigest(files map[string][]byte) string {
	h := sha256.New()
	for _, name := range TLSFiles {
		fmt.Fprintf(h, "%s %d\n", name, len(files[name]))
		h.Write(files[name])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// OperatorCommonName is the subject of the operator's client certificate, the one identity the
// agent API serves.
const OperatorCommonName = "pgpilot-operator"

// MetricsCommonName is the subject of the metrics client certificate (the cluster's
// MetricsSecret), the one identity an instance's /metrics serves once it has certificates.
const MetricsCommonName = "pgpilot-metrics"

// TLSPolicyFile is the configuration file (a key of the cluster's ConfigMap) that says whether
// every connection between instances must use TLS. Absent (a ConfigMap of an older operator),
// or not required while some instance still runs an agent without certificates, standbys try
// TLS and fall back to a password over plain TCP.
const TLSPolicyFile = "tls.json"

// TLSPolicy is the content of TLSPolicyFile.
type TLSPolicy struct {
	// Required: pg_hba.conf accepts remote connections over TLS only and the replication
	// user by its certificate; standbys verify the primary's certificate (verify-full).
	Required bool `json:"required"`
}

// ReadTLSPolicy reads the policy in dir; an absent file is the zero policy.
func ReadTLSPolicy(dir string) (TLSPolicy, error) {
	var p TLSPolicy
	data, err := os.ReadFile(filepath.Join(dir, TLSPolicyFile))
	if errors.Is(err, os.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return p, fmt.Errorf("read %s: %w", TLSPolicyFile, err)
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return p, fmt.Errorf("read %s: %w", TLSPolicyFile, err)
	}
	return p, nil
}

// MinTLSVersion is the oldest TLS the agent API and the operator speak to each other.
const MinTLSVersion = tls.VersionTLS13

// ClientTLS is how a client reaches the agents of one cluster (the operator its API, a scraper
// the metrics): it presents its client certificate (certPEM, keyPEM) and accepts only a server
// certificate issued by the cluster's CA (caPEM) for serverName.
func ClientTLS(caPEM, certPEM, keyPEM []byte, serverName string) (*tls.Config, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("cluster CA: no PEM certificate")
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      roots,
		ServerName:   serverName,
		MinVersion:   MinTLSVersion,
	}, nil
}
