package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

// postgresLog makes PostgreSQL's log part of the agent's: each of its JSON records (jsonlog,
// read from the logging collector's pipe) becomes one line of the agent's JSON log on the
// container's output, at the record's severity, with the record's fields under "record" and
// the instance and cluster beside them; lines that are not records (the postmaster's first
// ones, archive_command's output) become lines too. Notable records are counted for the
// operator, which makes Events of them.
type postgresLog struct {
	log *slog.Logger

	mu      sync.Mutex
	notices map[string]*agentapi.LogNotice
}

// collectPostgresLog has PostgreSQL log into the agent's log from the start: the server's output
// (when nobody else took it) and its JSON records.
func (a *Agent) collectPostgresLog() error {
	a.postgresLog = newPostgresLog(a.Log)
	if a.Instance.Output == nil {
		a.Instance.Output = a.postgresLog
	}
	if err := a.Instance.CollectLogs(logDir(a.Config), a.postgresLog.record); err != nil {
		return fmt.Errorf("postgres log: %w", err)
	}
	return nil
}

// logNotices are the notable records seen so far; nil before Run.
func (a *Agent) logNotices() []agentapi.LogNotice {
	if a.postgresLog == nil {
		return nil
	}
	return a.postgresLog.current()
}

// WithIdentity is the agent's logger for the instance of cfg: every line of the container's log,
// PostgreSQL's records too, says whose it is, once.
func WithIdentity(log logr.Logger, cfg agentapi.Config) logr.Logger {
	return log.WithValues("cluster", cfg.ClusterName, "instance", cfg.PodName)
}

// newPostgresLog writes PostgreSQL's records through log, the agent's (WithIdentity).
func newPostgresLog(log logr.Logger) *postgresLog {
	return &postgresLog{
		log:     slog.New(logr.ToSlogHandler(log.WithName("postgres"))),
		notices: map[string]*agentapi.LogNotice{},
	}
}

// logDir is where the logging collector's pipes are: beside the data directory, on its volume.
func logDir(cfg agentapi.Config) string {
	return filepath.Join(filepath.Dir(cfg.DataDir), "pgpilot-log")
}

// jsonRecord is what the agent reads of a jsonlog record to judge it.
type jsonRecord struct {
	Timestamp, RemoteHost, Severity, StateCode, Message string
}

// record logs one jsonlog line: its message as the line's, the rest of its fields under
// "record".
func (p *postgresLog) record(line []byte) {
	line = bytes.TrimSpace(line)
	var fields map[string]any
	if err := json.Unmarshal(line, &fields); err != nil {
		p.log.Warn(string(line), "stream", "collector", "parseError", err.Error())
		return
	}
	text := func(key string) string { s, _ := fields[key].(string); return s }
	r := jsonRecord{Timestamp: text("timestamp"), RemoteHost: text("remote_host"), Severity: text("error_severity"),
		StateCode: text("state_code"), Message: text("message")}
	delete(fields, "message")
	p.log.Log(context.Background(), severityLevel(r.Severity), r.Message, "record", fields)
	if reason, message := notable(r); reason != "" {
		p.notice(reason, message, r.Timestamp)
	}
}

// Write logs lines PostgreSQL wrote outside its records (the postgres.Instance's Output).
func (p *postgresLog) Write(data []byte) (int, error) {
	for line := range strings.Lines(string(data)) {
		if line = strings.TrimRight(line, "\n"); line != "" {
			p.log.Info(line, "stream", "stderr")
		}
	}
	return len(data), nil
}

// severityLevel maps PostgreSQL's severities onto slog's levels.
func severityLevel(severity string) slog.Level {
	switch {
	case strings.HasPrefix(severity, "DEBUG"):
		return slog.LevelDebug
	case severity == "WARNING":
		return slog.LevelWarn
	case severity == "ERROR", severity == "FATAL", severity == "PANIC":
		return slog.LevelError
	default: // LOG, INFO, NOTICE
		return slog.LevelInfo
	}
}

// notable says whether the operator should hear of a record, and how to tell it.
func notable(r jsonRecord) (reason, message string) {
	client := ""
	if r.RemoteHost != "" {
		client = fmt.Sprintf(" (from %s)", r.RemoteHost)
	}
	switch {
	// invalid_password, invalid_authorization_specification (no pg_hba.conf line, wrong method)
	case r.StateCode == "28P01" || r.StateCode == "28000":
		return agentapi.LogNoticeAuthenticationFailed, r.Message + client
	case strings.HasPrefix(r.Message, "archive command failed"):
		return agentapi.LogNoticeArchiveCommandFailed, r.Message
	case r.StateCode == "53100": // disk_full
		return agentapi.LogNoticeDiskFull, r.Message
	case r.Severity == "PANIC":
		return agentapi.LogNoticePanic, r.Message
	}
	return "", ""
}

func (p *postgresLog) notice(reason, message, timestamp string) {
	// jsonlog's timestamp: "2006-01-02 15:04:05.000 MST".
	at, err := time.Parse("2006-01-02 15:04:05.000 MST", timestamp)
	if err != nil {
		at = time.Now()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.notices[reason]
	if n == nil {
		n = &agentapi.LogNotice{Reason: reason}
		p.notices[reason] = n
	}
	n.Message, n.Last = message, at.UTC()
	n.Count++
}

// current is every kind of notice seen so far, by reason.
func (p *postgresLog) current() []agentapi.LogNotice {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]agentapi.LogNotice, 0, len(p.notices))
	for _, n := range p.notices {
		out = append(out, *n)
	}
	slices.SortFunc(out, func(a, b agentapi.LogNotice) int { return strings.Compare(a.Reason, b.Reason) })
	return out
}
