package agentapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// BackupConfigFile is the ConfigMap key (a file of Config.ConfigDir) with the cluster's
// BackupConfig; absent when the cluster has no spec.backup and is not being recovered.
const BackupConfigFile = "backup.json"

// Stanza is the pgBackRest stanza of every cluster: each has a repository path of its own.
const Stanza = "db"

// BackupConfig is what the agent needs to archive WAL, take backups and recover.
type BackupConfig struct {
	// Repository is the cluster's own; when set, the primary archives every WAL segment into it.
	Repository *Repository `json:"repository,omitempty"`
	// Recovery is where a new cluster's first instance restores from.
	Recovery *Recovery `json:"recovery,omitempty"`
	// Compression: none, gz, lz4 or zst.
	Compression string `json:"compression,omitempty"`
	// Parallel processes of backups, restores and asynchronous archiving.
	Parallel int `json:"parallel,omitempty"`
	// RetentionFull keeps this many full backups (RetentionFullType count) or days of them
	// (time); 0 keeps all.
	RetentionFull     int    `json:"retentionFull,omitempty"`
	RetentionFullType string `json:"retentionFullType,omitempty"`
}

// Repository is an S3 bucket path holding one cluster's pgBackRest stanza.
type Repository struct {
	// Host is the S3 server's DNS name; Port 0 means 443.
	Host     string `json:"host"`
	Port     int    `json:"port,omitempty"`
	Bucket   string `json:"bucket"`
	Path     string `json:"path"`
	Region   string `json:"region"`
	URIStyle string `json:"uriStyle"`
	// CA: the repository's credentials include a CA bundle (RepositoryKeys.CAFile).
	CA bool `json:"ca,omitempty"`
}

// Recovery is a restore from Repository, replaying WAL up to Target.
type Recovery struct {
	Repository Repository     `json:"repository"`
	Target     RecoveryTarget `json:"target"`
}

// RecoveryTarget is pgBackRest's restore --type and --target; an empty Type replays all WAL.
type RecoveryTarget struct {
	// Type: time, lsn, xid, name or immediate.
	Type      string `json:"type,omitempty"`
	Value     string `json:"value,omitempty"`
	Exclusive bool   `json:"exclusive,omitempty"`
}

// RecoveryTargetTime is the Type of a point in time: the operator sends it as RFC 3339, the
// agent passes it to pgBackRest in PostgreSQL's form.
const RecoveryTargetTime = "time"

// Which repository's keys: the cluster's own, or the one a recovery restores from.
const (
	OwnRepository      = "backup"
	RecoveryRepository = "recovery"
)

// RepositoryKeyFiles are the credential files of one repository in Config.CredentialsDir,
// projected from the Secrets spec.backup (or spec.bootstrap.recovery) names.
type RepositoryKeyFiles struct {
	AccessKeyID, SecretAccessKey, CA string
}

// KeyFiles names the files of the repository which (OwnRepository or RecoveryRepository).
func KeyFiles(which string) RepositoryKeyFiles {
	return RepositoryKeyFiles{
		AccessKeyID:     which + "-access-key-id",
		SecretAccessKey: which + "-secret-access-key",
		CA:              which + "-ca.crt",
	}
}

// RepositoryKeys are a repository's credentials as read from the files.
type RepositoryKeys struct {
	AccessKeyID, SecretAccessKey string
	// CAFile is the CA bundle's path, when the repository has one.
	CAFile string
}

// ReadRepositoryKeys reads the keys of repository which from dir; a missing or empty key is
// an error naming its file.
func ReadRepositoryKeys(dir, which string, withCA bool) (RepositoryKeys, error) {
	files := KeyFiles(which)
	var keys RepositoryKeys
	for _, f := range []struct {
		name string
		into *string
	}{{files.AccessKeyID, &keys.AccessKeyID}, {files.SecretAccessKey, &keys.SecretAccessKey}} {
		data, err := os.ReadFile(filepath.Join(dir, f.name))
		if err != nil {
			return RepositoryKeys{}, fmt.Errorf("repository keys: %s: %w", f.name, errors.Unwrap(err))
		}
		if *f.into = string(bytes.TrimSpace(data)); *f.into == "" {
			return RepositoryKeys{}, fmt.Errorf("repository keys: %s is empty", f.name)
		}
	}
	if withCA {
		keys.CAFile = filepath.Join(dir, files.CA)
	}
	return keys, nil
}

// ReadBackupConfig reads the BackupConfig in dir; a missing file is no configuration.
func ReadBackupConfig(dir string) (BackupConfig, error) {
	var c BackupConfig
	data, err := os.ReadFile(filepath.Join(dir, BackupConfigFile))
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("read backup configuration: %w", err)
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("parse %s: %w", BackupConfigFile, err)
	}
	return c, nil
}

// Paths of the backup API (on any instance; the operator asks the one it chose).
const (
	// PathBackups takes a BackupRequest and starts the backup in the background: 202, or 200
	// when a backup of that name is already known; 409 while another one runs.
	PathBackups = "/v1/backups"
	// PathBackup (GET, PathBackups + "/" + name) answers the BackupResult; 404 for a backup
	// this agent does not know (it restarted since, or was never asked).
	PathBackup = "/v1/backups/{name}"
)

// Errors of the backup API.
var (
	ErrBackupBusy    = errors.New("another backup is running, or the instance is not the primary")
	ErrUnknownBackup = errors.New("the agent does not know this backup (it restarted since, or was never asked)")
)

// BackupRequest asks for a backup of Type (full, diff or incr), named by the operator.
type BackupRequest struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// Backup phases an agent reports.
const (
	BackupRunning   = "Running"
	BackupCompleted = "Completed"
	BackupFailed    = "Failed"
)

// BackupResult is a backup as the agent knows it.
type BackupResult struct {
	Name      string `json:"name"`
	Phase     string `json:"phase"`
	StartedAt string `json:"startedAt,omitempty"`
	StoppedAt string `json:"stoppedAt,omitempty"`
	Error     string `json:"error,omitempty"`
	// Backup is pgBackRest's record of it, once Completed.
	Backup *BackupRecord `json:"backup,omitempty"`
}

// BackupRecord is one backup in the repository.
type BackupRecord struct {
	Label          string `json:"label"`
	Type           string `json:"type"`
	Start          int64  `json:"start"`
	Stop           int64  `json:"stop"`
	StartLSN       string `json:"startLSN,omitempty"`
	StopLSN        string `json:"stopLSN,omitempty"`
	StartWAL       string `json:"startWAL,omitempty"`
	StopWAL        string `json:"stopWAL,omitempty"`
	Size           int64  `json:"size,omitempty"`
	RepositorySize int64  `json:"repositorySize,omitempty"`
}

// ArchiveStatus is a primary's WAL archiving (pg_stat_archiver) and repository.
type ArchiveStatus struct {
	// Enabled: archive_mode is on and archive_command set.
	Enabled bool `json:"enabled"`
	// Unavailable says why the agent cannot archive at all (no pgbackrest binary, no keys).
	Unavailable string `json:"unavailable,omitempty"`
	// StanzaReady: the repository's stanza exists and matches this database; StanzaError is
	// why the last attempt to create or read it failed.
	StanzaReady      bool       `json:"stanzaReady,omitempty"`
	StanzaError      string     `json:"stanzaError,omitempty"`
	LastArchivedWAL  string     `json:"lastArchivedWAL,omitempty"`
	LastArchivedTime *time.Time `json:"lastArchivedTime,omitempty"`
	LastFailedWAL    string     `json:"lastFailedWAL,omitempty"`
	LastFailedTime   *time.Time `json:"lastFailedTime,omitempty"`
	FailedCount      int64      `json:"failedCount,omitempty"`
	// WALBytes is the size of pg_wal; VolumeFreeBytes the data volume's free space.
	WALBytes        int64 `json:"walBytes,omitempty"`
	VolumeFreeBytes int64 `json:"volumeFreeBytes,omitempty"`
	// Backups are the repository's, oldest first, as of the last look.
	Backups []BackupRecord `json:"backups,omitempty"`
}

// Failing says whether the last archive attempt failed.
func (a *ArchiveStatus) Failing() bool {
	return a.LastFailedTime != nil && (a.LastArchivedTime == nil || !a.LastArchivedTime.After(*a.LastFailedTime))
}
