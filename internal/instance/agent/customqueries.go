package agent

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/exporter"
)

// customQueries feeds the exporter the query files of dir, read again at each scrape and each
// status request (the kubelet updates a projected ConfigMap or Secret in place): a change is
// loaded without a restart, and files that do not parse leave the queries loaded before.
type customQueries struct {
	dir      string
	exporter *exporter.Exporter
	log      logr.Logger

	mu        sync.Mutex
	hash      string // of the files last read, loaded or not
	loaded    int
	loadError string
}

var (
	customQueriesDesc = prometheus.NewDesc("pgpilot_custom_queries",
		"Custom queries (spec.monitoring.customQueries) the exporter runs.", nil, nil)
	customQueriesLoadErrorDesc = prometheus.NewDesc("pgpilot_custom_queries_load_error",
		"1 when the custom query files as they are now could not be loaded (the ones loaded before still run), else 0.", nil, nil)
)

// Describe sends nothing: it wraps the exporter, an unchecked collector.
func (c *customQueries) Describe(chan<- *prometheus.Desc) {}

// Collect loads changed files, then scrapes.
func (c *customQueries) Collect(ch chan<- prometheus.Metric) {
	status := c.refresh()
	c.exporter.Collect(ch)
	if c.dir == "" {
		return
	}
	failed := 0.0
	if status.LoadError != "" {
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(customQueriesDesc, prometheus.GaugeValue, float64(status.CustomQueries))
	ch <- prometheus.MustNewConstMetric(customQueriesLoadErrorDesc, prometheus.GaugeValue, failed)
}

// refresh loads the files when they changed, and says how the custom queries fare; nil
// without a directory.
func (c *customQueries) refresh() *agentapi.MetricsStatus {
	if c.dir == "" {
		return &agentapi.MetricsStatus{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	files, hash, err := readQueryFiles(c.dir)
	if err == nil && hash != c.hash {
		c.hash = hash
		var queries []exporter.Query
		queries, err = parseQueryFiles(files)
		if err == nil {
			c.exporter.SetExtraQueries(queries)
			c.loaded, c.loadError = len(queries), ""
			c.log.Info("custom queries loaded", "queries", len(queries))
		}
	}
	if err != nil && err.Error() != c.loadError {
		c.loadError = err.Error()
		c.log.Error(err, "custom queries not loaded; the ones loaded before still run")
	}
	return &agentapi.MetricsStatus{CustomQueries: c.loaded, LoadError: c.loadError}
}

// status is refresh with the queries that failed in the last scrape; nil without custom queries.
func (c *customQueries) status() *agentapi.MetricsStatus {
	if c.dir == "" {
		return nil
	}
	status := c.refresh()
	status.FailingQueries = slices.DeleteFunc(c.exporter.Failing(), exporter.IsBuiltin)
	return status
}

// readQueryFiles reads the files of dir by name, skipping the kubelet's own entries ("..data"),
// and hashes their names and contents.
func readQueryFiles(dir string) (map[string][]byte, string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, "", fmt.Errorf("read custom queries: %w", err)
	}
	files := map[string][]byte{}
	h := sha256.New()
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, "", fmt.Errorf("read custom queries: %w", err)
		}
		files[e.Name()] = data
		fmt.Fprintf(h, "%s\x00%d\x00", e.Name(), len(data))
		h.Write(data)
	}
	return files, fmt.Sprintf("%x", h.Sum(nil)), nil
}

// parseQueryFiles parses every file; a prefix in two files is an error, as it would export
// the same series twice.
func parseQueryFiles(files map[string][]byte) ([]exporter.Query, error) {
	var queries []exporter.Query
	seen := map[string]string{}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(files)) {
		parsed, err := exporter.ParseQueries(files[name])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		for _, q := range parsed {
			if other, dup := seen[q.Name]; dup {
				errs = append(errs, fmt.Errorf("%s: %s: also in %s", name, q.Name, other))
			}
			seen[q.Name] = name
		}
		queries = append(queries, parsed...)
	}
	return queries, errors.Join(errs...)
}
