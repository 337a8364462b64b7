// Command grafana writes pgpilot's Grafana dashboard (config/grafana/pgpilot.json) from the
// panel list below: `make manifests` runs it, and CI fails when the committed file differs.
// Every panel reads the instances' metrics (the agent's exporter, as the PodMonitor scrapes
// them: labelled namespace, pod and pgpilot_cluster); the agent's tests check that each metric
// a panel names is one a live agent exports.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// sel selects the chosen cluster's series; panels write it as {S}.
const sel = `namespace="$namespace", pgpilot_cluster="$cluster"`

type query struct{ expr, legend string }

// statPanel is Grafana's panel type of a single value.
const statPanel = "stat"

type panel struct {
	kind, title, description, unit string
	queries                        []query
}

type row struct {
	title  string
	panels []panel
}

func stat(title, description, unit string, queries ...query) panel {
	return panel{statPanel, title, description, unit, queries}
}

func graph(title, description, unit string, queries ...query) panel {
	return panel{"timeseries", title, description, unit, queries}
}

func q(expr, legend string) query { return query{strings.ReplaceAll(expr, "{S}", "{"+sel+"}"), legend} }

var rows = []row{
	{"Cluster", []panel{
		stat("Instances up", "Instances whose exporter could connect to PostgreSQL and run its queries.", "none",
			q(`sum(pgpilot_up{S})`, "")),
		stat("Primary", "The instance that is not in recovery; more than one is a split brain.", "none",
			q(`max by (pod) (pgpilot_is_primary{S}) == 1`, "{{pod}}")),
		stat("Timeline", "The primary's timeline: it grows by one at each failover or switchover.", "none",
			q(`max(pgpilot_timeline{S})`, "")),
		stat("Streaming replicas", "Standbys streaming from the primary.", "none",
			q(`sum(pgpilot_streaming_replicas{S})`, "")),
		stat("PostgreSQL", "The server version of each instance.", "none",
			q(`max by (version) (pgpilot_postgres_version_num{S})`, "{{version}}")),
		stat("Settings pending restart", "Changed settings that take effect only once the instance restarts.", "none",
			q(`sum(pgpilot_settings_pending_restart{S})`, "")),
	}},
	{"Replication", []panel{
		graph("Replication lag", "WAL the primary wrote that each standby has not replayed.", "bytes",
			q(`max by (application_name) (pgpilot_replication_lag_bytes{S})`, "{{application_name}}")),
		graph("Replication lag (time)", "Time between a recent commit on the primary and its replay on each standby.", "s",
			q(`max by (application_name) (pgpilot_replication_lag_seconds{S})`, "{{application_name}}")),
		graph("Standbys streaming", "1 while a standby's WAL receiver streams from the primary.", "none",
			q(`pgpilot_wal_receiver_up{S}`, "{{pod}}")),
		graph("Received, not replayed", "WAL each standby received and has not applied yet.", "bytes",
			q(`pgpilot_replay_pending_bytes{S}`, "{{pod}}")),
		graph("WAL kept by replication slots", "WAL each slot holds in pg_wal for its consumer; an inactive slot grows without bound.", "bytes",
			q(`pgpilot_replication_slot_retained_bytes{S}`, "{{pod}} {{slot_name}}"),
			q(`pgpilot_replication_slot_retained_bytes{S} and on (namespace, pod, slot_name) pgpilot_replication_slot_active{S} == 0`,
				"{{pod}} {{slot_name}} (inactive)")),
	}},
	{"Connections and transactions", []panel{
		graph("Client backends", "Client backends by state, against max_connections.", "none",
			q(`sum by (state) (pgpilot_backends{S})`, "{{state}}"),
			q(`max(pgpilot_max_connections{S})`, "max_connections")),
		graph("Backends waiting on locks", "Client backends waiting for a lock, per instance.", "none",
			q(`sum by (pod) (pgpilot_backends_waiting_on_locks{S})`, "{{pod}}")),
		graph("Longest open transaction", "Age of each instance's oldest open client transaction; long ones hold back vacuum.", "s",
			q(`pgpilot_longest_transaction_seconds{S}`, "{{pod}}")),
		graph("Transactions", "Commits and rollbacks per second, per database.", "ops",
			q(`sum by (datname) (rate(pgpilot_database_commits_total{S}[$__rate_interval]))`, "{{datname}} commits"),
			q(`sum by (datname) (rate(pgpilot_database_rollbacks_total{S}[$__rate_interval]))`, "{{datname}} rollbacks")),
		graph("Deadlocks and recovery conflicts", "Deadlocks, and queries a standby cancelled to replay WAL.", "none",
			q(`sum by (datname) (increase(pgpilot_database_deadlocks_total{S}[$__rate_interval]))`, "{{datname}} deadlocks"),
			q(`sum by (datname) (increase(pgpilot_database_conflicts_total{S}[$__rate_interval]))`, "{{datname}} conflicts")),
		graph("Temporary files", "Bytes queries wrote to temporary files (work_mem too small for them).", "Bps",
			q(`sum by (pod) (rate(pgpilot_database_temp_bytes_total{S}[$__rate_interval]))`, "{{pod}}")),
	}},
	{"Storage, WAL and wraparound", []panel{
		graph("Database size", "Disk space of each database.", "bytes",
			q(`max by (datname) (pgpilot_database_size_bytes{S})`, "{{datname}}")),
		graph("Data volume free", "Share of each instance's data volume still free; pg_wal grows into it while archiving fails.", "percentunit",
			q(`pgpilot_volume_free_bytes{S} / pgpilot_volume_size_bytes{S}`, "{{pod}}")),
		graph("pg_wal", "Bytes in each instance's pg_wal.", "bytes",
			q(`pgpilot_wal_directory_bytes{S}`, "{{pod}}")),
		graph("Transaction ID age", "Transactions since each database's oldest unfrozen ID; PostgreSQL stops writes near 2^31.", "short",
			q(`max by (datname) (pgpilot_database_xid_age{S})`, "{{datname}}")),
		graph("Checkpoints", "Checkpoints per minute: by checkpoint_timeout, and requested (WAL volume, backups).", "none",
			q(`sum by (pod) (rate(pgpilot_checkpoints_timed_total{S}[$__rate_interval])) * 60`, "{{pod}} timed"),
			q(`sum by (pod) (rate(pgpilot_checkpoints_requested_total{S}[$__rate_interval])) * 60`, "{{pod}} requested")),
	}},
	{"Archiving and backups", []panel{
		stat("Archiving failing", "1 when the primary's last attempt to archive a WAL segment failed.", "none",
			q(`max(pgpilot_archive_failing{S} and on (namespace, pod) pgpilot_is_primary{S} == 1)`, "")),
		graph("Since the last archived segment", "Seconds since the primary archived a WAL segment.", "s",
			q(`pgpilot_archive_last_archived_age_seconds{S} and on (namespace, pod) pgpilot_is_primary{S} == 1`, "{{pod}}")),
		graph("WAL segments archived", "Segments archived and failed attempts per minute.", "none",
			q(`sum(rate(pgpilot_archive_archived_total{S}[$__rate_interval])) * 60`, "archived"),
			q(`sum(rate(pgpilot_archive_failed_total{S}[$__rate_interval])) * 60`, "failed")),
		stat("Backups", "Backups in the cluster's repository.", "none",
			q(`max(pgpilot_backups{S})`, "")),
		stat("Since the last backup", "Time since the newest backup in the repository completed.", "s",
			q(`time() - max(pgpilot_backup_last_completion_timestamp_seconds{S})`, "")),
	}},
	{"Statements", []panel{
		graph("Top statements by time",
			"Execution time per second of the statements with the most time since the statistics were reset (pg_stat_statements; each instance's top 10).", "s",
			q(`topk(10, sum by (datname, user, query) (rate(pgpilot_statement_seconds_total{S}[$__rate_interval])))`, "{{datname}} {{user}}: {{query}}")),
		graph("Top statements by calls", "Runs per second of the same statements.", "ops",
			q(`topk(10, sum by (datname, user, query) (rate(pgpilot_statement_calls_total{S}[$__rate_interval])))`, "{{datname}} {{user}}: {{query}}")),
		graph("Mean time of the top statements", "Mean time of one run of each of them, per instance.", "s",
			q(`pgpilot_statement_mean_seconds{S}`, "{{pod}} {{datname}}: {{query}}")),
	}},
	{"Exporter", []panel{
		graph("Scrape duration", "How long each instance's queries took in the last scrape.", "s",
			q(`pgpilot_scrape_duration_seconds{S}`, "{{pod}}")),
		graph("Failing queries", "Queries (built-in or custom) that failed in the last scrape; their metrics are missing.", "none",
			q(`sum by (pod, query) (pgpilot_query_error{S}) > 0`, "{{pod}} {{query}}")),
		graph("Custom queries", "Custom queries each exporter runs, and whether the files as they are now could not be loaded.", "none",
			q(`pgpilot_custom_queries{S}`, "{{pod}} loaded"),
			q(`pgpilot_custom_queries_load_error{S}`, "{{pod}} load error")),
		graph("Agent memory", "Resident memory of each instance agent.", "bytes",
			q(`process_resident_memory_bytes{S}`, "{{pod}}")),
	}},
}

var datasource = map[string]any{"type": "prometheus", "uid": "${datasource}"}

func queryVariable(name, label, query string) map[string]any {
	return map[string]any{
		"name": name, "label": label, "type": "query", "datasource": datasource,
		"query": map[string]any{"query": query, "refId": name}, "definition": query,
		"refresh": 2, "sort": 1, "includeAll": false, "multi": false,
	}
}

func dashboard() map[string]any {
	var panels []any
	id, y := 1, 0
	for _, r := range rows {
		panels = append(panels, map[string]any{"type": "row", "id": id, "title": r.title, "collapsed": false,
			"panels": []any{}, "gridPos": map[string]int{"h": 1, "w": 24, "x": 0, "y": y}})
		id, y = id+1, y+1
		width := 24 / len(r.panels)
		if width < 6 {
			width = 6
		}
		height := 8
		if r.panels[0].kind == statPanel {
			height = 4
		}
		x := 0
		for _, p := range r.panels {
			if x+width > 24 {
				x, y = 0, y+height
			}
			panels = append(panels, p.json(id, x, y, width, height))
			id, x = id+1, x+width
		}
		y += height
	}
	return map[string]any{
		"title":         "pgpilot: PostgreSQL clusters",
		"uid":           "pgpilot-clusters",
		"description":   "The instances of a pgpilot PostgresCluster, as its PodMonitor scrapes them.",
		"tags":          []string{"pgpilot", "postgresql"},
		"schemaVersion": 39,
		"version":       1,
		"editable":      true,
		"graphTooltip":  1,
		"refresh":       "30s",
		"time":          map[string]string{"from": "now-6h", "to": "now"},
		"templating": map[string]any{"list": []any{
			map[string]any{"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus"},
			queryVariable("namespace", "Namespace", "label_values(pgpilot_up, namespace)"),
			queryVariable("cluster", "Cluster", `label_values(pgpilot_up{namespace="$namespace"}, pgpilot_cluster)`),
		}},
		"panels": panels,
	}
}

func (p panel) json(id, x, y, w, h int) map[string]any {
	targets := make([]any, len(p.queries))
	for i, t := range p.queries {
		targets[i] = map[string]any{"datasource": datasource, "expr": t.expr, "legendFormat": t.legend,
			"refId": string(rune('A' + i))}
	}
	out := map[string]any{
		"type": p.kind, "id": id, "title": p.title, "description": p.description, "datasource": datasource,
		"gridPos":     map[string]int{"h": h, "w": w, "x": x, "y": y},
		"fieldConfig": map[string]any{"defaults": map[string]any{"unit": p.unit}, "overrides": []any{}},
		"targets":     targets,
	}
	if p.kind == statPanel {
		out["options"] = map[string]any{"reduceOptions": map[string]any{"calcs": []string{"lastNotNull"}},
			"textMode": "value_and_name", "colorMode": "value", "graphMode": "none"}
	}
	return out
}

func main() {
	out, err := json.MarshalIndent(dashboard(), "", "  ")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if _, err := os.Stdout.Write(append(out, '\n')); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
