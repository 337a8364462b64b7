package agent

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/certs"
)

// The cluster's certificates reach the pod as a projected Secret (Config.TLSDir), which the
// kubelet rewrites on renewal. The agent copies them where only the server's user can read
// them (PostgreSQL and libpq refuse a key others may read), reloads PostgreSQL, and serves
// the API with the new certificate from the next handshake on: no restart.

// tlsState is the certificates as the agent last loaded them.
type tlsState struct {
	// files are the contents last copied, by name; nil before the first load.
	files map[string][]byte
	// cert and clientCAs serve the API.
	cert      atomic.Pointer[tls.Certificate]
	clientCAs atomic.Pointer[x509.CertPool]
	// validity is each loaded certificate's, by its role, for the metrics.
	validity atomic.Pointer[map[string][2]time.Time]
	// digest identifies files for the status (agentapi.CertificatesDigest).
	digest atomic.Pointer[string]
}

// loadedDigest is the digest of the certificates in use; "" before the first load.
func (t *tlsState) loadedDigest() string {
	if d := t.digest.Load(); d != nil {
		return *d
	}
	return ""
}

// loadedCertificates name the certificates in the metrics (the label certificate) by file.
var loadedCertificates = map[string]string{
	agentapi.PostgresCertFile:    "postgres",
	agentapi.TLSCertFile:         "api",
	agentapi.ReplicationCertFile: "replication",
}

// PrivateTLSDir is where PostgreSQL and libpq read the instance's certificates: beside the
// socket, on the pod's own volume, never on the data volume.
func PrivateTLSDir(c agentapi.Config) string { return filepath.Join(c.SocketDir, "tls") }

// TLSSettings are the server settings of an instance with certificates.
func TLSSettings(c agentapi.Config) map[string]string {
	dir := PrivateTLSDir(c)
	return map[string]string{
		"ssl":           "on",
		"ssl_cert_file": filepath.Join(dir, agentapi.PostgresCertFile),
		"ssl_key_file":  filepath.Join(dir, agentapi.PostgresKeyFile),
		"ssl_ca_file":   filepath.Join(dir, agentapi.ClientCAFile),
	}
}

// syncTLS loads the certificates when their files changed, and reports whether they did. Files
// that are missing, empty or do not fit together change nothing: the instance keeps serving
// with what it has.
func (a *Agent) syncTLS() (bool, error) {
	if a.Config.TLSDir == "" {
		return false, nil
	}
	files := map[string][]byte{}
	var problems []string
	for _, name := range agentapi.TLSFiles {
		data, err := os.ReadFile(filepath.Join(a.Config.TLSDir, name))
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s: %v", name, errors.Unwrap(err)))
		case len(bytes.TrimSpace(data)) == 0:
			problems = append(problems, name+" is empty")
		}
		files[name] = data
	}
	if len(problems) > 0 {
		return false, fmt.Errorf("certificates in %s: %s", a.Config.TLSDir, strings.Join(problems, "; "))
	}
	if maps.EqualFunc(files, a.tls.files, bytes.Equal) {
		return false, nil
	}
	cert, err := tls.X509KeyPair(files[agentapi.TLSCertFile], files[agentapi.TLSKeyFile])
	if err != nil {
		return false, fmt.Errorf("server certificate: %w", err)
	}
	if _, err := tls.X509KeyPair(files[agentapi.PostgresCertFile], files[agentapi.PostgresKeyFile]); err != nil {
		return false, fmt.Errorf("PostgreSQL's server certificate: %w", err)
	}
	if _, err := tls.X509KeyPair(files[agentapi.ReplicationCertFile], files[agentapi.ReplicationKeyFile]); err != nil {
		return false, fmt.Errorf("replication certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(files[agentapi.TLSCAFile]) {
		return false, errors.New("CA certificate: no PEM certificate")
	}
	if err := a.Instance.WritePrivateFiles(PrivateTLSDir(a.Config), files); err != nil {
		return false, fmt.Errorf("copy certificates: %w", err)
	}
	validity := map[string][2]time.Time{}
	for file, role := range loadedCertificates {
		if c, err := certs.ParseCertificate(files[file]); err == nil {
			validity[role] = [2]time.Time{c.NotBefore, c.NotAfter}
		}
	}
	a.tls.cert.Store(&cert)
	a.tls.clientCAs.Store(pool)
	a.tls.validity.Store(&validity)
	digest := agentapi.CertificatesDigest(files)
	a.tls.digest.Store(&digest)
	a.tls.files = files
	return true, nil
}

// serverTLS is the API's TLS configuration, with the certificates as last loaded. A client
// certificate is asked for, not required: the kubelet's probes present none, and the API paths
// check for the operator's (apiClientsOnly).
func (a *Agent) serverTLS() *tls.Config { return a.tlsWithClients(tls.VerifyClientCertIfGiven) }

// metricsTLS is the metrics endpoint's: nobody scrapes without a certificate of the cluster's
// CA, and the handler asks for the metrics identity (metricsReaderOnly).
func (a *Agent) metricsTLS() *tls.Config { return a.tlsWithClients(tls.RequireAndVerifyClientCert) }

func (a *Agent) tlsWithClients(auth tls.ClientAuthType) *tls.Config {
	return &tls.Config{
		MinVersion: agentapi.MinTLSVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return &tls.Config{
				MinVersion:   agentapi.MinTLSVersion,
				Certificates: []tls.Certificate{*a.tls.cert.Load()},
				ClientCAs:    a.tls.clientCAs.Load(),
				ClientAuth:   auth,
			}, nil
		},
	}
}

// apiClientsOnly lets requests for the API (/v1/) through only with the operator's client
// certificate, verified against the cluster's CA, and the follow kit also with the replication
// user's, which the other agents present (whoever streams replication reads every row anyway);
// the probes stay open to the kubelet.
func apiClientsOnly(next http.Handler, replicationUser string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		allowed := presents(r, agentapi.OperatorCommonName) ||
			r.URL.Path == agentapi.PathMajorUpgradeKit && presents(r, replicationUser)
		if strings.HasPrefix(r.URL.Path, "/v1/") && !allowed {
			http.Error(w, "the operator's client certificate is required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// metricsReaderOnly serves the metrics only to the metrics identity: another certificate of
// the cluster's CA (the operator's, the replication user's) is not a scraper's.
func metricsReaderOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !presents(r, agentapi.MetricsCommonName) {
			http.Error(w, "the cluster's metrics client certificate is required", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// presents: the request came with a verified client certificate for commonName.
func presents(r *http.Request, commonName string) bool {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return false
	}
	leaf := r.TLS.VerifiedChains[0][0]
	return leaf.Subject.CommonName == commonName && slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
}

// connInfoTLS are the TLS keywords of a connection to the primary. Once the cluster requires
// TLS the primary's certificate is verified for the -rw Service's name and the replication
// user presents its own; until then TLS is tried and a plain connection accepted, as the
// primary may run an agent without certificates.
func (a *Agent) connInfoTLS() []string {
	if a.Config.TLSDir == "" {
		return nil
	}
	policy, err := agentapi.ReadTLSPolicy(a.Config.ConfigDir)
	if err != nil {
		a.Log.Error(err, "TLS policy unreadable; verifying the primary's certificate")
		policy.Required = true
	}
	mode := "prefer"
	if policy.Required {
		mode = "verify-full"
	}
	dir := PrivateTLSDir(a.Config)
	return []string{"sslmode", mode, "sslrootcert", filepath.Join(dir, agentapi.ServerCAFile),
		"sslcert", filepath.Join(dir, agentapi.ReplicationCertFile), "sslkey", filepath.Join(dir, agentapi.ReplicationKeyFile)}
}

// reloadRenewedCertificates makes PostgreSQL read certificates that changed on disk; the API
// uses them from the next handshake on.
func (a *Agent) reloadRenewedCertificates() {
	changed, err := a.syncTLS()
	if err != nil {
		a.Log.Error(err, "certificates not loaded; keeping the ones in use")
		return
	}
	if !changed {
		return
	}
	if err := a.Instance.Reload(); err != nil {
		a.Log.Error(err, "reload for renewed certificates")
		return
	}
	a.Log.Info("renewed certificates loaded")
}

var (
	certificateStartDesc = prometheus.NewDesc("pgpilot_certificate_start_timestamp_seconds",
		"When the certificate the instance loaded became valid, by certificate: postgres (PostgreSQL's server certificate), api (the agent API's), replication (the replication user's).",
		[]string{"certificate"}, nil)
	certificateExpiryDesc = prometheus.NewDesc("pgpilot_certificate_expiry_timestamp_seconds",
		"When the certificate the instance loaded expires, by certificate (as pgpilot_certificate_start_timestamp_seconds).",
		[]string{"certificate"}, nil)
)

// certificateCollector reports the validity of the certificates the agent loaded last: what
// the instance serves, not what the Secret says, so that a renewal that never arrived shows.
type certificateCollector struct{ a *Agent }

func (c certificateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- certificateStartDesc
	ch <- certificateExpiryDesc
}

func (c certificateCollector) Collect(ch chan<- prometheus.Metric) {
	validity := c.a.tls.validity.Load()
	if validity == nil {
		return
	}
	for role, v := range *validity {
		ch <- prometheus.MustNewConstMetric(certificateStartDesc, prometheus.GaugeValue, float64(v[0].Unix()), role)
		ch <- prometheus.MustNewConstMetric(certificateExpiryDesc, prometheus.GaugeValue, float64(v[1].Unix()), role)
	}
}

// serverErrorLog puts what an HTTP server of the agent's logs by itself (TLS handshake failures:
// a client without the certificate it needs) into the agent's log as warnings.
func (a *Agent) serverErrorLog(server string) *log.Logger {
	return slog.NewLogLogger(logr.ToSlogHandler(a.Log.WithName(server)), slog.LevelWarn)
}
