package agent_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/certs"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// remoteAddress is a loopback address outside pg_hba.conf's 127.0.0.1/32 lines, so that a
// connection to it is treated as a remote client's.
const remoteAddress = "127.0.0.2"

// startTLSPair runs a primary and a standby with certificates and TLS required, the standby
// cloned and streaming through TLSHost.
func startTLSPair(t *testing.T) (primary, standby *pgtest.RunningAgent, c pgtest.Certificates) {
	t.Helper()
	c = pgtest.IssueCertificates(t)
	leases := pgtest.NewMemoryLeases("db-0")
	primaryInst, standbyInst := pgtest.NewInstance(t, "db-0"), pgtest.NewInstance(t, "db-1")
	primaryCfg := agentConfig(t, "db-0", primaryInst, primaryInst.Port)
	standbyCfg := agentConfig(t, "db-1", standbyInst, primaryInst.Port)
	for _, x := range []struct {
		inst *postgres.Instance
		cfg  *agentapi.Config
	}{{primaryInst, &primaryCfg}, {standbyInst, &standbyCfg}} {
		x.inst.Settings["listen_addresses"] = "127.0.0.1," + remoteAddress
		pgtest.WriteConfigTLS(t, x.inst, pgtest.Cluster(nil), agentapi.TLSPolicy{Required: true})
		pgtest.EnableTLS(t, x.inst, x.cfg, c)
	}
	primary = pgtest.StartAgent(t, primaryCfg, primaryInst, leases)
	standby = pgtest.StartAgent(t, standbyCfg, standbyInst, leases)
	return primary, standby, c
}

// tlsStatus asks an agent for its status as the operator does.
func tlsStatus(r *pgtest.RunningAgent, config *tls.Config) (*agentapi.Status, error) {
	return agentapi.HTTPClient{}.Status(context.Background(), agentapi.Endpoint{
		Address: strings.TrimPrefix(r.URL, "https://"), Token: token, TLS: config})
}

// remoteClient connects as the app to the primary's remote address, verifying its certificate
// for TLSHost with the CA (verify-full), or without TLS when ca is nil.
func remoteClient(ctx context.Context, inst *postgres.Instance, ca []byte) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(postgres.ConnInfo("host", remoteAddress, "port", fmt.Sprint(inst.Port), "user", "app",
		"password", credentials.AppPassword, "dbname", "app", "sslmode", "disable", "connect_timeout", "5"))
	if err != nil {
		return nil, err
	}
	// From the remote address too: Linux would pick 127.0.0.1, which pg_hba.conf trusts.
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(remoteAddress)}, Timeout: 5 * time.Second}
	cfg.DialFunc = dialer.DialContext
	if ca != nil {
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(ca)
		cfg.TLSConfig = &tls.Config{RootCAs: roots, ServerName: pgtest.TLSHost, MinVersion: tls.VersionTLS12}
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// waitStreaming waits until the standby's agent, asked as the operator asks, says it streams.
func waitStreaming(t *testing.T, standby *pgtest.RunningAgent, operator *tls.Config) {
	t.Helper()
	pgtest.Eventually(t, "standby streaming over TLS", func() error {
		s, err := tlsStatus(standby, operator)
		if err == nil && !s.Streaming {
			err = fmt.Errorf("standby not streaming: %+v", s)
		}
		return err
	})
}

func TestReplicationAndClientsUseTLS(t *testing.T) {
	ctx := context.Background()
	primary, standby, c := startTLSPair(t)
	operator := c.OperatorTLS(t)
	waitStreaming(t, standby, operator)

	admin := pgtest.Connect(t, primary.Instance, agentapi.Superuser, credentials.SuperuserPassword, "postgres")
	var ssl bool
	var version, clientDN string
	if err := admin.QueryRow(ctx, `SELECT s.ssl, coalesce(s.version, ''), coalesce(s.client_dn, '')
		FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid)`).Scan(&ssl, &version, &clientDN); err != nil {
		t.Fatalf("replication connection: %v", err)
	}
	if !ssl || version != "TLSv1.3" || !strings.Contains(clientDN, "CN="+agentapi.DefaultReplicationUser) {
		t.Errorf("replication connection: ssl %v, version %q, client DN %q; want TLSv1.3 with the replication certificate", ssl, version, clientDN)
	}

	verified, err := remoteClient(ctx, primary.Instance, c.CA.CertPEM)
	if err != nil {
		t.Fatalf("a client verifying the server's certificate (verify-full): %v", err)
	}
	defer func() { _ = verified.Close(ctx) }()
	if err := verified.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil || !ssl {
		t.Errorf("the verified client's connection: ssl %v, %v", ssl, err)
	}
	if plain, err := remoteClient(ctx, primary.Instance, nil); err == nil {
		_ = plain.Close(ctx)
		t.Error("a remote client without TLS was let in")
	} else if !strings.Contains(err.Error(), "no encryption") {
		t.Errorf("a remote client without TLS: %v; want refused by pg_hba.conf (no encryption)", err)
	}
}

func TestAgentAPIAndMetricsServeTheirCertificatesOnly(t *testing.T) {
	primary, _, c := startTLSPair(t)
	defer checkMetricsServeTheMetricsCertificateOnly(t, primary, c)
	pgtest.Eventually(t, "primary answers the operator", func() error {
		_, err := tlsStatus(primary, c.OperatorTLS(t))
		return err
	})

	noClientCert := c.OperatorTLS(t)
	noClientCert.Certificates = nil
	if _, err := tlsStatus(primary, noClientCert); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("status without a client certificate: %v; want 401", err)
	}
	stranger := pgtest.IssueCertificates(t) // another cluster's CA: an operator certificate it did not issue
	foreign := c.OperatorTLS(t)
	foreign.Certificates = stranger.OperatorTLS(t).Certificates
	if _, err := tlsStatus(primary, foreign); err == nil {
		t.Error("status with a client certificate of another CA succeeded")
	}
	replicationCert, err := tls.X509KeyPair(c.Files[agentapi.ReplicationCertFile], c.Files[agentapi.ReplicationKeyFile])
	if err != nil {
		t.Fatal(err)
	}
	notOperator := c.OperatorTLS(t)
	notOperator.Certificates = []tls.Certificate{replicationCert}
	if _, err := tlsStatus(primary, notOperator); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("status with the replication user's certificate: %v; want 401", err)
	}
	// The follow kit is the one path the other agents reach with it (this agent keeps none).
	kitFrom := agentapi.Endpoint{Address: strings.TrimPrefix(primary.URL, "https://"), Token: token, TLS: notOperator}
	if _, err := agentapi.FetchFollowKit(context.Background(), kitFrom); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("follow kit with the replication user's certificate: %v; want 404 (none kept)", err)
	}
	kitFrom.TLS = noClientCert
	if _, err := agentapi.FetchFollowKit(context.Background(), kitFrom); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("follow kit without a client certificate: %v; want 401", err)
	}
	if _, err := tlsStatus(primary, stranger.OperatorTLS(t)); err == nil {
		t.Error("the operator trusted an agent certificate of another CA")
	}
	if code, body, err := get(strings.Replace(primary.URL, "https://", "http://", 1)+agentapi.PathStatus, token); err == nil && code == http.StatusOK {
		t.Errorf("the agent answered plain HTTP: %s", body)
	}
	// The kubelet's probes: HTTPS without a client certificate, without verifying the server.
	// (Once the agent's start is done: before, it answers not ready.)
	pgtest.Eventually(t, "the readiness probe answered over HTTPS", func() error { return primary.Probe(agentapi.PathReadiness) })
}

// checkMetricsServeTheMetricsCertificateOnly: the metrics answer the metrics certificate and
// nothing else of the cluster's CA, no plain HTTP, no certificate of another CA.
func checkMetricsServeTheMetricsCertificateOnly(t *testing.T, primary *pgtest.RunningAgent, c pgtest.Certificates) {
	t.Helper()
	pgtest.Eventually(t, "the metrics answer the metrics certificate", func() error {
		code, body, err := primary.Scrape(c.MetricsTLS(t))
		if err == nil && (code != http.StatusOK || !strings.Contains(body, "\npgpilot_up 1")) {
			err = fmt.Errorf("scrape: %d %.200s", code, body)
		}
		return err
	})
	if code, _, err := primary.Scrape(c.OperatorTLS(t)); err != nil || code != http.StatusForbidden {
		t.Errorf("metrics with the operator's certificate: %d, %v; want 403", code, err)
	}
	noClientCert := c.MetricsTLS(t)
	noClientCert.Certificates = nil
	if code, _, err := primary.Scrape(noClientCert); err == nil {
		t.Errorf("metrics without a client certificate answered %d; want the handshake refused", code)
	}
	stranger := pgtest.IssueCertificates(t)
	foreign := c.MetricsTLS(t)
	foreign.Certificates = stranger.MetricsTLS(t).Certificates
	if code, _, err := primary.Scrape(foreign); err == nil {
		t.Errorf("metrics with a certificate of another CA answered %d; want the handshake refused", code)
	}
	if code, body, err := get(strings.Replace(primary.MetricsURL, "https://", "http://", 1), ""); err == nil && code == http.StatusOK {
		t.Errorf("the metrics answered plain HTTP: %.200s", body)
	}
}

// A renewed server certificate is served by PostgreSQL and the API without a restart, and the
// standby keeps streaming.
func TestRenewedCertificatesLoadWithoutRestart(t *testing.T) {
	ctx := context.Background()
	primary, standby, c := startTLSPair(t)
	operator := c.OperatorTLS(t)
	waitStreaming(t, standby, operator)
	admin := pgtest.Connect(t, primary.Instance, agentapi.Superuser, credentials.SuperuserPassword, "postgres")
	var started time.Time
	if err := admin.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&started); err != nil {
		t.Fatal(err)
	}

	c.ReissueServer(t)
	renewed, err := certs.ParseCertificate(c.Files[agentapi.TLSCertFile])
	if err != nil {
		t.Fatal(err)
	}
	pgtest.SetCertificates(t, primary.Config, c)
	pgtest.Eventually(t, "PostgreSQL serves the renewed certificate", func() error {
		conn, err := remoteClient(ctx, primary.Instance, c.CA.CertPEM)
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close(ctx) }()
		served := conn.PgConn().Conn().(*tls.Conn).ConnectionState().PeerCertificates[0]
		if served.SerialNumber.Cmp(renewed.SerialNumber) != 0 {
			return fmt.Errorf("serves serial %s, want %s", served.SerialNumber, renewed.SerialNumber)
		}
		return nil
	})
	pgtest.Eventually(t, "the API serves the renewed certificate", func() error {
		conn, err := tls.Dial("tcp", strings.TrimPrefix(primary.URL, "https://"), operator)
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close() }()
		if served := conn.ConnectionState().PeerCertificates[0]; served.SerialNumber.Cmp(renewed.SerialNumber) != 0 {
			return fmt.Errorf("serves serial %s", served.SerialNumber)
		}
		return nil
	})
	pgtest.Eventually(t, "the metrics report the renewed certificate's expiry", func() error {
		want := fmt.Sprintf(`pgpilot_certificate_expiry_timestamp_seconds{certificate="postgres"} %s`,
			strconv.FormatFloat(float64(renewed.NotAfter.Unix()), 'g', -1, 64))
		_, body, err := primary.Scrape(c.MetricsTLS(t))
		if err == nil && !strings.Contains(body, want) {
			err = fmt.Errorf("no %s in the scrape", want)
		}
		return err
	})
	var now time.Time
	if err := admin.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&now); err != nil || !now.Equal(started) {
		t.Errorf("PostgreSQL restarted for the renewal: started %s, now %s (%v)", started, now, err)
	}
	if s, err := tlsStatus(standby, operator); err != nil || !s.Streaming {
		t.Errorf("standby after the renewal: %+v, %v", s, err)
	}
}
