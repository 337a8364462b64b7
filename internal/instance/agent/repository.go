package agent

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/pgbackrest"
)

// How often the primary's agent rereads the repository's backups, and retries a stanza it
// could not create.
const (
	repositoryCheckInterval = 30 * time.Second
	repositoryRetryInterval = 10 * time.Second
)

// repositoryState is what the agent last learnt from the cluster's own repository.
type repositoryState struct {
	mu sync.Mutex
	// stanzaFor is the configuration file the stanza was created for; stanzaErr why it failed.
	// attemptedFor and attemptedAt are the last look at the repository.
	stanzaFor    []byte
	stanzaErr    string
	attemptedFor []byte
	attemptedAt  time.Time
	backups      []agentapi.BackupRecord
	// jobs are the backups asked of this agent, by name; running is the one in progress.
	jobs    map[string]*agentapi.BackupResult
	running string
}

// pgBackRestStateDir holds pgBackRest's configuration files, spool, locks and logs, beside
// PGDATA on the data volume: a WAL segment queued for the repository survives a restart.
func pgBackRestStateDir(c agentapi.Config) string {
	return filepath.Join(filepath.Dir(c.DataDir), "pgbackrest")
}

// repositoryConfigPath is pgbackrest.conf of repository which.
func repositoryConfigPath(c agentapi.Config, which string) string {
	return filepath.Join(pgBackRestStateDir(c), which+".conf")
}

// pgBackRestOptions is repository r of the cluster as pgBackRest's options for this instance.
func pgBackRestOptions(c agentapi.Config, b agentapi.BackupConfig, r agentapi.Repository, which string) pgbackrest.Options {
	o := pgbackrest.Options{
		Stanza: agentapi.Stanza,
		Repository: pgbackrest.Repository{
			Endpoint: r.Host, Port: r.Port, Bucket: r.Bucket, Path: r.Path, Region: r.Region, URIStyle: r.URIStyle,
		},
		DataDir:       c.DataDir,
		SocketDir:     c.SocketDir,
		Port:          c.PostgresPort,
		User:          agentapi.Superuser,
		StateDir:      pgBackRestStateDir(c),
		ProcessMax:    b.Parallel,
		CompressType:  b.Compression,
		RetentionFull: b.RetentionFull,
		// A failing repository shows in pg_stat_archiver within this, and a segment that waits
		// for it holds one archiver attempt no longer.
		ArchiveTimeout: 30 * time.Second,
	}
	if b.RetentionFullType == pgbackrest.RetentionByTime {
		o.RetentionFullType = pgbackrest.RetentionByTime
	}
	if r.CA {
		o.Repository.CAFile = filepath.Join(c.CredentialsDir, agentapi.KeyFiles(which).CA)
	}
	return o
}

// writeRepositoryConfigs renders pgbackrest.conf of each configured repository, replacing a
// file only when it changed. It returns the configuration it read.
// owner, when set, is PostgreSQL's OS user (tests run the agent as root): pgBackRest runs as it.
func writeRepositoryConfigs(c agentapi.Config, owner *syscall.Credential) (agentapi.BackupConfig, error) {
	b, err := agentapi.ReadBackupConfig(c.ConfigDir)
	if err != nil {
		return b, err
	}
	for which, r := range map[string]*agentapi.Repository{agentapi.OwnRepository: b.Repository, agentapi.RecoveryRepository: recoveryRepository(b)} {
		if r == nil {
			continue
		}
		if err := mkdirOwned(pgBackRestStateDir(c), owner); err != nil {
			return b, fmt.Errorf("pgbackrest state: %w", err)
		}
		rendered, err := pgbackrest.Render(pgBackRestOptions(c, b, *r, which))
		if err != nil {
			return b, err
		}
		content := []byte(rendered)
		path := repositoryConfigPath(c, which)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, content) {
			continue
		}
		if err := os.WriteFile(path+".tmp", content, 0o600); err != nil {
			return b, fmt.Errorf("write %s: %w", path, err)
		}
		if owner != nil {
			if err := os.Chown(path+".tmp", int(owner.Uid), int(owner.Gid)); err != nil {
				return b, err
			}
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			return b, fmt.Errorf("write %s: %w", path, err)
		}
	}
	return b, nil
}

func recoveryRepository(b agentapi.BackupConfig) *agentapi.Repository {
	if b.Recovery == nil {
		return nil
	}
	return &b.Recovery.Repository
}

// RepositoryRunner runs pgBackRest against repository which (agentapi.OwnRepository or
// RecoveryRepository) with its keys as the credential files hold them now.
func RepositoryRunner(c agentapi.Config, which string) (pgbackrest.Runner, error) {
	b, err := agentapi.ReadBackupConfig(c.ConfigDir)
	if err != nil {
		return pgbackrest.Runner{}, err
	}
	r := b.Repository
	if which == agentapi.RecoveryRepository {
		r = recoveryRepository(b)
	}
	if r == nil {
		return pgbackrest.Runner{}, fmt.Errorf("the cluster has no %s repository", which)
	}
	keys, err := agentapi.ReadRepositoryKeys(c.CredentialsDir, which, false)
	if err != nil {
		return pgbackrest.Runner{}, err
	}
	binary, err := exec.LookPath("pgbackrest")
	if err != nil {
		return pgbackrest.Runner{}, fmt.Errorf("pgbackrest is not in this PostgreSQL image: %w", err)
	}
	return pgbackrest.Runner{
		Binary:     binary,
		ConfigPath: repositoryConfigPath(c, which),
		Stanza:     agentapi.Stanza,
		Keys:       pgbackrest.Keys{AccessKeyID: keys.AccessKeyID, SecretAccessKey: keys.SecretAccessKey},
	}, nil
}

func mkdirOwned(dir string, owner *syscall.Credential) error {
	if err := os.MkdirAll(dir, 0o700); err != nil || owner == nil {
		return err
	}
	return os.Chown(dir, int(owner.Uid), int(owner.Gid))
}

// repositoryRunner is RepositoryRunner as the agent runs it: as PostgreSQL's user, logging
// with the server.
func (a *Agent) repositoryRunner(which string) (pgbackrest.Runner, error) {
	runner, err := RepositoryRunner(a.Config, which)
	runner.RunAs, runner.Output = a.Instance.RunAs, a.Instance.Output
	return runner, err
}

// PgBackRestCommand is `agent pgbackrest [--repository=backup|recovery] ARGS...`: it replaces
// the process with pgBackRest run against the repository (the cluster's own by default) with
// its keys, as the pod's environment describes it. It is the archive_command and
// restore_command PostgreSQL calls, and a person's way to look at the repository from the pod
// (`agent pgbackrest info`).
func PgBackRestCommand(args []string) error {
	which := agentapi.OwnRepository
	if len(args) > 0 {
		if value, ok := strings.CutPrefix(args[0], "--repository="); ok {
			which, args = value, args[1:]
		}
	}
	c, err := agentapi.FromEnvironment(os.LookupEnv)
	if err != nil {
		return err
	}
	runner, err := RepositoryRunner(c, which)
	if err != nil {
		return err
	}
	argv := append([]string{runner.Binary, "--config=" + runner.ConfigPath, "--stanza=" + runner.Stanza}, args...)
	return syscall.Exec(runner.Binary, argv, append(os.Environ(), runner.Environment()...))
}

// keepRepository runs on every agent until ctx ends: it keeps the pgBackRest files current
// and, on the primary, creates the stanza (once per configuration, retried while it fails) and
// rereads the repository's backups.
func (a *Agent) keepRepository(ctx context.Context) {
	ticker := time.NewTicker(a.Options.ConfigInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		b, err := writeRepositoryConfigs(a.Config, a.Instance.RunAs)
		if err != nil {
			a.Log.Error(err, "pgbackrest configuration")
			continue
		}
		if b.Repository == nil || !a.Instance.Running() || !a.isPrimary() || a.fenced() != nil {
			continue
		}
		a.checkRepository(ctx)
	}
}

// checkRepository creates the stanza when the configuration changed (retrying while it
// fails) and rereads the backups every repositoryCheckInterval.
func (a *Agent) checkRepository(ctx context.Context) {
	config, _ := os.ReadFile(repositoryConfigPath(a.Config, agentapi.OwnRepository))
	s := &a.repository
	s.mu.Lock()
	wait := repositoryCheckInterval
	if s.stanzaErr != "" {
		wait = repositoryRetryInterval
	}
	due := !bytes.Equal(s.attemptedFor, config) || time.Since(s.attemptedAt) >= wait
	s.mu.Unlock()
	if !due {
		return
	}
	runner, err := a.repositoryRunner(agentapi.OwnRepository)
	if err == nil && !a.stanzaCreatedFor(config) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err = runner.StanzaCreate(ctx)
		cancel()
		if err == nil {
			a.Log.Info("pgbackrest stanza ready", "repository", runner.ConfigPath)
		}
	}
	var backups []agentapi.BackupRecord
	if err == nil {
		backups, err = a.readBackups(ctx, runner)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attemptedFor, s.attemptedAt = config, time.Now()
	if err != nil {
		if s.stanzaErr != err.Error() {
			a.Log.Error(err, "pgbackrest repository")
		}
		s.stanzaFor, s.stanzaErr = nil, err.Error()
		return
	}
	s.stanzaFor, s.stanzaErr, s.backups = config, "", backups
}

func (a *Agent) stanzaCreatedFor(config []byte) bool {
	a.repository.mu.Lock()
	defer a.repository.mu.Unlock()
	return a.repository.stanzaFor != nil && bytes.Equal(a.repository.stanzaFor, config)
}

func (a *Agent) readBackups(ctx context.Context, runner pgbackrest.Runner) ([]agentapi.BackupRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	info, err := runner.Info(ctx)
	if err != nil {
		return nil, err
	}
	records := make([]agentapi.BackupRecord, 0, len(info.Backups))
	for _, b := range info.Backups {
		records = append(records, BackupRecordOf(b))
	}
	return records, nil
}

// BackupRecordOf is b as the agent reports it.
func BackupRecordOf(b pgbackrest.BackupInfo) agentapi.BackupRecord {
	return agentapi.BackupRecord{
		Label: b.Label, Type: b.Type, Start: b.Timestamp.Start, Stop: b.Timestamp.Stop,
		StartLSN: b.LSN.Start, StopLSN: b.LSN.Stop, StartWAL: b.Archive.Start, StopWAL: b.Archive.Stop,
		Size: b.Info.Size, RepositorySize: b.Info.Repository.Size,
	}
}

// archiveStatus is the primary's archiving as PostgreSQL and the repository report it.
func (a *Agent) archiveStatus(ctx context.Context, conn *pgx.Conn) (*agentapi.ArchiveStatus, error) {
	b, err := agentapi.ReadBackupConfig(a.Config.ConfigDir)
	if err != nil || b.Repository == nil {
		return nil, err
	}
	status := &agentapi.ArchiveStatus{}
	if err := conn.QueryRow(ctx, `SELECT current_setting('archive_mode') <> 'off' AND current_setting('archive_command') <> '',
		COALESCE(last_archived_wal, ''), last_archived_time, COALESCE(last_failed_wal, ''), last_failed_time, failed_count,
		(SELECT COALESCE(sum(size), 0) FROM pg_ls_waldir())::bigint
		FROM pg_stat_archiver`).Scan(&status.Enabled, &status.LastArchivedWAL, &status.LastArchivedTime,
		&status.LastFailedWAL, &status.LastFailedTime, &status.FailedCount, &status.WALBytes); err != nil {
		return nil, fmt.Errorf("query archiver: %w", err)
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(a.Config.DataDir, &fs); err == nil {
		status.VolumeFreeBytes = int64(fs.Bavail) * fs.Bsize
	}
	if _, err := RepositoryRunner(a.Config, agentapi.OwnRepository); err != nil {
		status.Unavailable = err.Error()
	}
	a.repository.mu.Lock()
	status.StanzaReady = a.repository.stanzaFor != nil
	status.StanzaError, status.Backups = a.repository.stanzaErr, a.repository.backups
	a.repository.mu.Unlock()
	return status, nil
}
