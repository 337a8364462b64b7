// Package exporter is the instance agent's Prometheus exporter: PostgreSQL's statistics as
// pgpilot_ metrics, read by a role with pg_monitor (never the superuser) over one connection
// that scrapes share, one round of queries per scrape under a deadline. Metrics are declared
// the way postgres_exporter's custom queries are (a query, and a usage per column), so built-in
// and user queries go through the same code.
package exporter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/prometheus/client_golang/prometheus"
)

// Usage says what a column of a query's result is.
type Usage string

const (
	// Gauge and Counter columns are values; Label columns name the row's series.
	Gauge   Usage = "GAUGE"
	Counter Usage = "COUNTER"
	Label   Usage = "LABEL"
)

// Column is one column of a query's result.
type Column struct {
	Name        string
	Usage       Usage
	Description string
}

// Query is one statement run at each scrape. Each value column becomes the metric
// <Prefix>_<column>, labelled by the row's Label columns.
type Query struct {
	// Name identifies the query in pgpilot_query_error.
	Name   string
	Prefix string
	SQL    string
	// MinVersion and MaxVersion (server_version_num, 0: unbounded) limit the query to the
	// PostgreSQL versions whose catalogs it reads.
	MinVersion, MaxVersion int
	// PrimaryOnly skips the query on a standby.
	PrimaryOnly bool
	// Guard, when set, is a statement answering one boolean: false skips the query at this
	// scrape without an error (a view of an extension the server does not load).
	Guard string
	// Databases the query runs in, each over a connection of its own, its series labelled
	// datname; AllDatabases is every database that accepts connections. None: the monitoring
	// connection's database.
	Databases []string
	Columns   []Column
}

// AllDatabases in Query.Databases is every database that accepts connections.
const AllDatabases = "*"

// Exporter is a prometheus.Collector over one PostgreSQL server.
type Exporter struct {
	// Connect opens a monitoring connection (as a pg_monitor role) to database, "" for the
	// default one.
	Connect func(ctx context.Context, database string) (*pgx.Conn, error)
	// Timeout bounds one scrape; each statement gets at most half of it.
	Timeout time.Duration
	Log     logr.Logger

	mu      sync.Mutex // one scrape at a time, on one kept connection
	conn    *pgx.Conn
	version int
	queries []Query
	failing []string
}

// New returns an exporter of the built-in queries and extra.
func New(connect func(ctx context.Context, database string) (*pgx.Conn, error), log logr.Logger, extra ...Query) *Exporter {
	return &Exporter{Connect: connect, Timeout: 5 * time.Second, Log: log, queries: append(BuiltinQueries(), extra...)}
}

// Failing names the queries that failed in the last scrape.
func (e *Exporter) Failing() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.failing)
}

// SetExtraQueries replaces the queries after the built-in ones (a reload of custom queries).
func (e *Exporter) SetExtraQueries(extra []Query) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.queries = append(BuiltinQueries(), extra...)
}

var (
	upDesc = prometheus.NewDesc("pgpilot_up",
		"1 when the last scrape could connect to PostgreSQL and run its queries, else 0.", nil, nil)
	durationDesc = prometheus.NewDesc("pgpilot_scrape_duration_seconds",
		"How long the last scrape's queries took.", nil, nil)
	queryErrorDesc = prometheus.NewDesc("pgpilot_query_error",
		"1 when the query failed in the last scrape (its metrics are missing), else 0.", []string{"query"}, nil)
)

// Describe sends nothing: the series depend on the queries, which can change (an unchecked
// collector).
func (e *Exporter) Describe(chan<- *prometheus.Desc) {}

// Collect runs every query once.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	e.mu.Lock()
	defer e.mu.Unlock()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), e.Timeout)
	defer cancel()
	up := 1.0
	failedBefore := e.failing
	e.failing = nil
	if err := e.ensureConnection(ctx); err != nil {
		e.Log.Error(err, "metrics: connect to postgres")
		up = 0
	} else {
		standby, standbyErr := e.inRecovery(ctx)
		for _, q := range e.queries {
			if !q.appliesTo(e.version) || (q.PrimaryOnly && standby) {
				continue
			}
			err := standbyErr
			if err == nil || !q.PrimaryOnly {
				err = e.run(ctx, q, ch)
			}
			failed := 0.0
			if err != nil {
				// Logged when it starts failing, not at every scrape: the metric and the
				// Monitoring condition say it goes on.
				if !slices.Contains(failedBefore, q.Name) {
					e.Log.Error(err, "metrics: query failed", "query", q.Name)
				}
				e.failing = append(e.failing, q.Name)
				failed = 1
			}
			ch <- prometheus.MustNewConstMetric(queryErrorDesc, prometheus.GaugeValue, failed, q.Name)
			if e.conn.IsClosed() {
				up = 0 // the connection broke (a timeout): the next scrape reconnects
				break
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(durationDesc, prometheus.GaugeValue, time.Since(start).Seconds())
}

func (e *Exporter) ensureConnection(ctx context.Context) error {
	if e.conn != nil && !e.conn.IsClosed() {
		return nil
	}
	conn, err := e.open(ctx, "")
	if err != nil {
		return err
	}
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&e.version); err != nil {
		_ = conn.Close(ctx)
		return err
	}
	e.conn = conn
	return nil
}

// open connects to database with the statement deadline set: a slow statement is cancelled by
// the server, which keeps the connection usable.
func (e *Exporter) open(ctx context.Context, database string) (*pgx.Conn, error) {
	conn, err := e.Connect(ctx, database)
	if err != nil {
		return nil, err
	}
	timeout := max(e.Timeout/2, time.Millisecond).Milliseconds()
	if _, err := conn.Exec(ctx, fmt.Sprintf("SET statement_timeout = %d; SET lock_timeout = %d", timeout, timeout)); err != nil {
		_ = conn.Close(ctx)
		return nil, err
	}
	return conn, nil
}

// inRecovery asks only when a query is for the primary alone.
func (e *Exporter) inRecovery(ctx context.Context) (bool, error) {
	if !slices.ContainsFunc(e.queries, func(q Query) bool { return q.PrimaryOnly }) {
		return false, nil
	}
	var standby bool
	err := e.conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&standby)
	return standby, err
}

// Close closes the monitoring connection.
func (e *Exporter) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.conn != nil {
		_ = e.conn.Close(context.Background())
	}
}

func (q Query) appliesTo(version int) bool {
	return (q.MinVersion == 0 || version >= q.MinVersion) && (q.MaxVersion == 0 || version <= q.MaxVersion)
}

// run runs q in its databases and sends a metric per value column and row; a row's NULL value
// is left out. It is all or nothing: a query failing halfway (or in one database) sends none.
func (e *Exporter) run(ctx context.Context, q Query, ch chan<- prometheus.Metric) error {
	if q.Guard != "" {
		var applies bool
		if err := e.conn.QueryRow(ctx, q.Guard).Scan(&applies); err != nil || !applies {
			return err
		}
	}
	var metrics []prometheus.Metric
	if len(q.Databases) == 0 {
		m, err := q.collect(ctx, e.conn, "")
		if err != nil {
			return err
		}
		metrics = m
	} else {
		databases, err := e.databases(ctx, q.Databases)
		if err != nil {
			return err
		}
		for _, db := range databases {
			m, err := e.collectIn(ctx, q, db)
			if err != nil {
				return fmt.Errorf("database %s: %w", db, err)
			}
			metrics = append(metrics, m...)
		}
	}
	for _, m := range metrics {
		ch <- m
	}
	return nil
}

// databases expands AllDatabases.
func (e *Exporter) databases(ctx context.Context, names []string) ([]string, error) {
	if !slices.Contains(names, AllDatabases) {
		return names, nil
	}
	rows, err := e.conn.Query(ctx, "SELECT datname FROM pg_database WHERE datallowconn AND NOT datistemplate ORDER BY datname")
	if err != nil {
		return nil, err
	}
	all, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	return slices.Compact(slices.Sorted(slices.Values(append(all, slices.DeleteFunc(slices.Clone(names),
		func(n string) bool { return n == AllDatabases })...)))), nil
}

// collectIn runs q over a connection to database that lasts this scrape only: a connection kept
// to a user's database would make their DROP DATABASE fail.
func (e *Exporter) collectIn(ctx context.Context, q Query, database string) ([]prometheus.Metric, error) {
	conn, err := e.open(ctx, database)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	return q.collect(ctx, conn, database)
}

// collect runs q on conn; database, when set, labels every series as datname.
func (q Query) collect(ctx context.Context, conn *pgx.Conn, database string) ([]prometheus.Metric, error) {
	rows, err := conn.Query(ctx, q.SQL)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	columns, err := q.columnIndexes(rows.FieldDescriptions())
	if err != nil {
		return nil, err
	}
	var metrics []prometheus.Metric
	for rows.Next() {
		values, err := rows.Values()
		if err != nil {
			return nil, err
		}
		row, err := q.rowMetrics(columns, values, database)
		if err != nil {
			return nil, err
		}
		metrics = append(metrics, row...)
	}
	return metrics, rows.Err()
}

// columnIndexes finds each declared column in the result.
func (q Query) columnIndexes(fields []pgconn.FieldDescription) ([]int, error) {
	indexes := make([]int, len(q.Columns))
	for i, c := range q.Columns {
		indexes[i] = -1
		for j, f := range fields {
			if f.Name == c.Name {
				indexes[i] = j
			}
		}
		if indexes[i] < 0 {
			return nil, fmt.Errorf("column %q is not in the query's result", c.Name)
		}
	}
	return indexes, nil
}

func (q Query) rowMetrics(indexes []int, values []any, database string) ([]prometheus.Metric, error) {
	var labelNames, labelValues []string
	if database != "" {
		labelNames, labelValues = []string{DatabaseLabel}, []string{database}
	}
	for i, c := range q.Columns {
		if c.Usage == Label {
			labelNames = append(labelNames, c.Name)
			labelValues = append(labelValues, fmt.Sprint(valueOr(values[indexes[i]], "")))
		}
	}
	var metrics []prometheus.Metric
	for i, c := range q.Columns {
		if c.Usage == Label || values[indexes[i]] == nil {
			continue
		}
		v, err := toFloat(values[indexes[i]])
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", c.Name, err)
		}
		valueType := prometheus.GaugeValue
		if c.Usage == Counter {
			valueType = prometheus.CounterValue
		}
		desc := prometheus.NewDesc(metricName(q.Prefix, c.Name), c.Description, labelNames, nil)
		m, err := prometheus.NewConstMetric(desc, valueType, v, labelValues...)
		if err != nil {
			return nil, err
		}
		metrics = append(metrics, m)
	}
	return metrics, nil
}

func metricName(prefix, column string) string {
	if prefix == "" {
		return column
	}
	return prefix + "_" + column
}

func valueOr(v any, fallback any) any {
	if v == nil {
		return fallback
	}
	return v
}

var errNotNumeric = errors.New("not a number")

// toFloat converts what pgx returns for numeric, boolean and interval columns.
func toFloat(v any) (float64, error) {
	switch x := v.(type) {
	case int16:
		return float64(x), nil
	case int32:
		return float64(x), nil
	case int64:
		return float64(x), nil
	case float32:
		return float64(x), nil
	case float64:
		return x, nil
	case bool:
		if x {
			return 1, nil
		}
		return 0, nil
	case pgtype.Numeric:
		f, err := x.Float64Value()
		if err != nil || !f.Valid {
			return math.NaN(), err
		}
		return f.Float64, nil
	case pgtype.Interval:
		return float64(x.Microseconds)/1e6 + float64(x.Days)*86400 + float64(x.Months)*30*86400, nil
	default:
		return 0, fmt.Errorf("%w: %T", errNotNumeric, v)
	}
}
