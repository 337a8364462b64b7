package agent

import (
	"context"
	"errors"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/pgbackrest"
)

// Errors of StartBackup.
var (
	ErrBackupRunning = errors.New("another backup is running on this instance")
	ErrNotPrimary    = errors.New("backups are taken on the primary")
)

// maxBackupJobs bounds the finished backups the agent remembers.
const maxBackupJobs = 20

// StartBackup starts the named backup in the background on the primary; started is false
// when the agent already knows the name (its result is then BackupResult's).
func (a *Agent) StartBackup(ctx context.Context, req agentapi.BackupRequest) (started bool, err error) {
	s := &a.repository
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, known := s.jobs[req.Name]; known {
		return false, nil
	}
	if s.running != "" {
		return false, ErrBackupRunning
	}
	if !a.Instance.Running() || !a.isPrimary() || a.fenced() != nil {
		return false, ErrNotPrimary
	}
	runner, err := a.repositoryRunner(agentapi.OwnRepository)
	if err != nil {
		return false, err
	}
	if s.jobs == nil {
		s.jobs = map[string]*agentapi.BackupResult{}
	}
	forgetOldest(s.jobs)
	startedAt := time.Now().UTC()
	s.jobs[req.Name] = &agentapi.BackupResult{Name: req.Name, Phase: agentapi.BackupRunning, StartedAt: startedAt.Format(time.RFC3339)}
	s.running = req.Name
	go a.runBackup(context.WithoutCancel(ctx), runner, req, startedAt)
	return true, nil
}

func (a *Agent) runBackup(ctx context.Context, runner pgbackrest.Runner, req agentapi.BackupRequest, started time.Time) {
	a.Log.Info("backup started", "backup", req.Name, "type", req.Type)
	err := runner.Backup(ctx, req.Type)
	var record *agentapi.BackupRecord
	var backups []agentapi.BackupRecord
	if err == nil {
		if backups, err = a.readBackups(ctx, runner); err == nil {
			record = newestSince(backups, started)
		}
	}
	s := &a.repository
	s.mu.Lock()
	defer s.mu.Unlock()
	job := s.jobs[req.Name]
	job.StoppedAt = time.Now().UTC().Format(time.RFC3339)
	s.running = ""
	switch {
	case err != nil:
		job.Phase, job.Error = agentapi.BackupFailed, err.Error()
		a.Log.Error(err, "backup failed", "backup", req.Name)
	case record == nil:
		job.Phase, job.Error = agentapi.BackupFailed, "pgbackrest finished but the repository lists no backup started since"
	default:
		job.Phase, job.Backup = agentapi.BackupCompleted, record
		s.backups = backups
		a.Log.Info("backup completed", "backup", req.Name, "label", record.Label)
	}
}

// newestSince is the last backup that started at or after started (pgBackRest's times are
// whole seconds).
func newestSince(backups []agentapi.BackupRecord, started time.Time) *agentapi.BackupRecord {
	for i := len(backups) - 1; i >= 0; i-- {
		if backups[i].Start >= started.Unix() {
			return &backups[i]
		}
	}
	return nil
}

// forgetOldest drops finished jobs beyond maxBackupJobs, oldest first.
func forgetOldest(jobs map[string]*agentapi.BackupResult) {
	for len(jobs) >= maxBackupJobs {
		oldest := ""
		for name, j := range jobs {
			if j.Phase != agentapi.BackupRunning && (oldest == "" || j.StartedAt < jobs[oldest].StartedAt) {
				oldest = name
			}
		}
		if oldest == "" {
			return
		}
		delete(jobs, oldest)
	}
}

// BackupResult is the named backup as the agent knows it; nil for one it does not.
func (a *Agent) BackupResult(name string) *agentapi.BackupResult {
	a.repository.mu.Lock()
	defer a.repository.mu.Unlock()
	job, ok := a.repository.jobs[name]
	if !ok {
		return nil
	}
	copied := *job
	return &copied
}
