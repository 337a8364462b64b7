package pgtest

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/certs"
	"github.com/pgpilot/pgpilot-operator/internal/instance/agent"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// TLSHost is the name the test servers' certificates are for; it resolves to loopback.
const TLSHost = "localhost"

// Loopback is the address every test server listens on.
const Loopback = "127.0.0.1"

// Certificates are a test cluster's: a CA, the instances' files (agentapi.TLSFiles) and the
// operator's and the metrics scraper's client certificates.
type Certificates struct {
	CA       certs.Pair
	Files    map[string][]byte
	Operator certs.Pair
	Metrics  certs.Pair
}

// IssueCertificates makes a CA and issues what a cluster needs from it, as the operator does.
func IssueCertificates(t TB) Certificates {
	t.Helper()
	now := time.Now()
	ca, err := certs.NewAuthority("pgtest CA", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := Certificates{CA: ca, Files: map[string][]byte{agentapi.TLSCAFile: ca.CertPEM,
		agentapi.ServerCAFile: ca.CertPEM, agentapi.ClientCAFile: ca.CertPEM}}
	c.ReissueServer(t)
	issue := func(cn string) certs.Pair {
		p, err := certs.Issue(ca, certs.Request{CommonName: cn, Usage: certs.Client, Validity: time.Hour}, now)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	replication := issue(agentapi.DefaultReplicationUser)
	c.Files[agentapi.ReplicationCertFile], c.Files[agentapi.ReplicationKeyFile] = replication.CertPEM, replication.KeyPEM
	c.Operator, c.Metrics = issue(agentapi.OperatorCommonName), issue(agentapi.MetricsCommonName)
	return c
}

// ReissueServer replaces the server certificate with a new one from the same CA, as a renewal.
func (c *Certificates) ReissueServer(t TB) {
	t.Helper()
	server, err := certs.Issue(c.CA, certs.Request{CommonName: TLSHost, DNSNames: []string{TLSHost}, Usage: certs.Server,
		Validity: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c.Files[agentapi.TLSCertFile], c.Files[agentapi.TLSKeyFile] = server.CertPEM, server.KeyPEM
	c.Files[agentapi.PostgresCertFile], c.Files[agentapi.PostgresKeyFile] = server.CertPEM, server.KeyPEM
}

// OperatorTLS is the operator's client configuration for the test agents.
func (c Certificates) OperatorTLS(t TB) *tls.Config { return c.ClientTLS(t, c.Operator) }

// MetricsTLS is a scraper's client configuration for the test agents' metrics.
func (c Certificates) MetricsTLS(t TB) *tls.Config { return c.ClientTLS(t, c.Metrics) }

// ClientTLS presents client to the test agents and verifies them with the CA.
func (c Certificates) ClientTLS(t TB, client certs.Pair) *tls.Config {
	t.Helper()
	config, err := agentapi.ClientTLS(c.CA.CertPEM, client.CertPEM, client.KeyPEM, TLSHost)
	if err != nil {
		t.Fatal(err)
	}
	return config
}

// EnableTLS gives the instance behind cfg the certificates, where the kubelet would project
// them, and the settings the agent runs PostgreSQL with; standbys reach the primary by
// TLSHost, the certificate's name.
func EnableTLS(t TB, inst *postgres.Instance, cfg *agentapi.Config, c Certificates) {
	t.Helper()
	InstallCertificates(t, inst, cfg, c.Files)
	cfg.PrimaryHost = TLSHost
}

// InstallCertificates gives the instance behind cfg the certificate files (agentapi.TLSFiles,
// the keys of a cluster's TLS Secret) and the settings the agent runs PostgreSQL with.
func InstallCertificates(t TB, inst *postgres.Instance, cfg *agentapi.Config, files map[string][]byte) {
	t.Helper()
	cfg.TLSDir = filepath.Join(filepath.Dir(inst.ConfigFile), "tls-projected")
	if err := os.MkdirAll(cfg.TLSDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeCertificates(t, *cfg, files)
	maps.Copy(inst.Settings, agent.TLSSettings(*cfg))
}

// SetCertificates replaces the certificate files, as the kubelet does when the Secret changes.
func SetCertificates(t TB, cfg agentapi.Config, c Certificates) {
	t.Helper()
	writeCertificates(t, cfg, c.Files)
}

func writeCertificates(t TB, cfg agentapi.Config, files map[string][]byte) {
	t.Helper()
	for name, data := range files {
		path := filepath.Join(cfg.TLSDir, name)
		if err := os.WriteFile(path+".tmp", data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
}

// Address is the agent's host:port, without the scheme.
func (r *RunningAgent) Address() string {
	return strings.TrimPrefix(strings.TrimPrefix(r.URL, "https://"), "http://")
}

// Probe asks one of the agent's probe endpoints as the kubelet does: over HTTPS when the agent
// serves it, without verifying its certificate or presenting one.
func (r *RunningAgent) Probe(path string) error {
	probe := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // as the kubelet probes
	resp, err := probe.Get(r.URL + path)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %d", path, resp.StatusCode)
	}
	return nil
}

// Scrape reads the agent's /metrics as Prometheus does, with config's client certificate.
func (r *RunningAgent) Scrape(config *tls.Config) (int, string, error) {
	return Scrape(context.Background(), r.MetricsURL, config)
}

// Scrape GETs a metrics URL with config (nil for plain HTTP) and returns the status and body.
func Scrape(ctx context.Context, url string, config *tls.Config) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: config}}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}
