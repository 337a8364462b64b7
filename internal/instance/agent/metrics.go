package agent

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/exporter"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// serveMetrics serves /metrics for Prometheus: PostgreSQL's statistics read as the monitoring
// role, the data volume's space, and the agent process's own. It returns the listener's
// address and a function that stops it all. Once the cluster has certificates it serves TLS
// to the holders of the metrics client certificate only: custom queries can export any text
// the monitoring role reads.
func (a *Agent) serveMetrics() (string, func(), error) {
	e := exporter.New(func(ctx context.Context, database string) (*pgx.Conn, error) {
		return postgres.ConnectLocal(ctx, a.Instance.SocketDir, a.Instance.Port, agentapi.MonitorUser, cmp.Or(database, "postgres"))
	}, a.Log.WithName("metrics"))
	queries := &customQueries{dir: a.Config.CustomQueriesDir, exporter: e, log: a.Log.WithName("metrics")}
	a.customQueries.Store(queries)
	registry := prometheus.NewRegistry()
	registry.MustRegister(queries, volumeCollector{dir: a.Config.DataDir}, backupCollector{a}, certificateCollector{a},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	handler := promhttp.HandlerFor(registry, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError, MaxRequestsInFlight: 2, Timeout: 10 * time.Second})
	address := cmp.Or(a.Options.MetricsListenAddress, a.Config.MetricsListenAddress())
	listener, err := net.Listen("tcp", address)
	if err != nil {
		return "", nil, fmt.Errorf("listen %s: %w", address, err)
	}
	if a.Config.TLSDir != "" {
		handler, listener = metricsReaderOnly(handler), tls.NewListener(listener, a.metricsTLS())
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", handler)
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: a.serverErrorLog("metrics")}
	go func() { _ = server.Serve(listener) }()
	return listener.Addr().String(), func() { _ = server.Close(); e.Close() }, nil
}

var (
	volumeFreeDesc = prometheus.NewDesc("pgpilot_volume_free_bytes",
		"Bytes left for PostgreSQL on the data volume (pg_wal grows into them while archiving fails).", nil, nil)
	volumeSizeDesc = prometheus.NewDesc("pgpilot_volume_size_bytes", "Size of the data volume.", nil, nil)
)

// volumeCollector reports the space of the file system holding dir.
type volumeCollector struct{ dir string }

func (v volumeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- volumeFreeDesc
	ch <- volumeSizeDesc
}

func (v volumeCollector) Collect(ch chan<- prometheus.Metric) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(v.dir, &fs); err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(volumeFreeDesc, prometheus.GaugeValue, float64(fs.Bavail)*float64(fs.Bsize))
	ch <- prometheus.MustNewConstMetric(volumeSizeDesc, prometheus.GaugeValue, float64(fs.Blocks)*float64(fs.Bsize))
}

var (
	lastBackupDesc = prometheus.NewDesc("pgpilot_backup_last_completion_timestamp_seconds",
		"When the latest backup in the repository completed (on the primary, with spec.backup).", nil, nil)
	backupsDesc = prometheus.NewDesc("pgpilot_backups", "Backups in the repository (on the primary, with spec.backup).", nil, nil)
)

// backupCollector reports the repository's backups as the primary last read them.
type backupCollector struct{ a *Agent }

func (b backupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- lastBackupDesc
	ch <- backupsDesc
}

func (b backupCollector) Collect(ch chan<- prometheus.Metric) {
	r := &b.a.repository
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stanzaFor == nil || !b.a.Instance.Running() || !b.a.isPrimary() {
		return
	}
	ch <- prometheus.MustNewConstMetric(backupsDesc, prometheus.GaugeValue, float64(len(r.backups)))
	if n := len(r.backups); n > 0 {
		ch <- prometheus.MustNewConstMetric(lastBackupDesc, prometheus.GaugeValue, float64(r.backups[n-1].Stop))
	}
}
