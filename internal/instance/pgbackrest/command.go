package pgbackrest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Keys are the repository's credentials, passed in the environment only.
type Keys struct {
	AccessKeyID, SecretAccessKey string
}

// Runner runs pgBackRest commands with one configuration file.
type Runner struct {
	// Binary is the pgbackrest executable; empty means "pgbackrest" on PATH.
	Binary     string
	ConfigPath string
	Stanza     string
	Keys       Keys
	// RunAs is the OS user PostgreSQL runs as, when the agent runs as root (tests).
	RunAs *syscall.Credential
	// Output receives pgBackRest's console log.
	Output io.Writer
}

func (r Runner) binary() string {
	if r.Binary == "" {
		return "pgbackrest"
	}
	return r.Binary
}

// ArchiveCommand is PostgreSQL's archive_command. pgBackRest finds the keys in the
// environment PostgreSQL inherited from the agent.
func (r Runner) ArchiveCommand() string {
	return fmt.Sprintf("%s --config=%s --stanza=%s archive-push %%p", r.binary(), r.ConfigPath, r.Stanza)
}

// RestoreCommand is restore_command, for a standby or a recovery that reads archived WAL.
func (r Runner) RestoreCommand() string {
	return fmt.Sprintf("%s --config=%s --stanza=%s archive-get %%f \"%%p\"", r.binary(), r.ConfigPath, r.Stanza)
}

// Environment is what pgBackRest needs in a process's environment, e.g. the PostgreSQL
// server's, for archive_command.
func (r Runner) Environment() []string {
	return []string{"PGBACKREST_REPO1_S3_KEY=" + r.Keys.AccessKeyID, "PGBACKREST_REPO1_S3_KEY_SECRET=" + r.Keys.SecretAccessKey}
}

// run runs one command and returns its standard output.
func (r Runner) run(ctx context.Context, command string, args ...string) ([]byte, error) {
	argv := append([]string{"--config=" + r.ConfigPath, "--stanza=" + r.Stanza}, args...)
	argv = append(argv, command)
	cmd := exec.CommandContext(ctx, r.binary(), argv...)
	cmd.Env = append(os.Environ(), r.Environment()...)
	if r.RunAs != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: r.RunAs}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if r.Output != nil {
		cmd.Stderr = io.MultiWriter(&stderr, r.Output)
		if command != "info" {
			cmd.Stdout = io.MultiWriter(&stdout, r.Output)
		}
	}
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("pgbackrest %s: %w: %s", command, err, lastLines(stdout.String()+stderr.String(), 5))
	}
	return stdout.Bytes(), nil
}

// StanzaCreate creates the stanza, or checks that the repository's matches this database.
func (r Runner) StanzaCreate(ctx context.Context) error {
	_, err := r.run(ctx, "stanza-create")
	return err
}

// StanzaUpgrade records in the repository that the database is of a new major (and system
// identifier) after pg_upgrade: archiving and backups refuse the new cluster until then.
func (r Runner) StanzaUpgrade(ctx context.Context) error {
	_, err := r.run(ctx, "stanza-upgrade")
	return err
}

// Check makes PostgreSQL switch WAL and waits until the segment is archived.
func (r Runner) Check(ctx context.Context) error {
	_, err := r.run(ctx, "check")
	return err
}

// Backup types.
const (
	Full = "full"
	Diff = "diff"
	Incr = "incr"
)

// RetentionByTime is the repo-retention-full-type that counts RetentionFull in days rather
// than backups.
const RetentionByTime = "time"

// Backup takes a backup of the given type and enforces retention after it.
func (r Runner) Backup(ctx context.Context, backupType string) error {
	_, err := r.run(ctx, "backup", "--type="+backupType)
	return err
}

// Target is where a restore stops replaying WAL. The zero Target replays everything.
type Target struct {
	// Type: time, lsn, xid, name or immediate; empty for the end of the archive.
	Type  string
	Value string
	// Exclusive stops just before the target instead of just after it.
	Exclusive bool
	// Set is the backup label to restore from; empty means the latest that can reach the target.
	Set string
	// RestoreCommand replaces the restore_command pgBackRest writes (its own archive-get).
	RestoreCommand string
}

// TimeTarget is t as a time target both pgBackRest (which picks the backup set by it) and
// PostgreSQL (recovery_target_time) read.
func TimeTarget(t time.Time) string {
	return t.Format("2006-01-02 15:04:05.999999-07:00")
}

// Restore writes a backup into the configured data directory (empty, or overwritten file by
// file with delta) with recovery settings to reach target, after which the server promotes.
func (r Runner) Restore(ctx context.Context, target Target) error {
	args := []string{"--target-action=promote"}
	if target.Type != "" {
		args = append(args, "--type="+target.Type)
		if target.Type != "immediate" {
			args = append(args, "--target="+target.Value)
		}
		if target.Exclusive {
			args = append(args, "--target-exclusive")
		}
	}
	if target.Set != "" {
		args = append(args, "--set="+target.Set)
	}
	if target.RestoreCommand != "" {
		args = append(args, "--recovery-option=restore_command="+target.RestoreCommand)
	}
	_, err := r.run(ctx, "restore", args...)
	return err
}

// DeltaReport is what a delta restore wrote and what it found already in place, in bytes.
type DeltaReport struct {
	Copied, Kept int64
}

// RestoreStandbyDelta makes the configured data directory, whatever it holds (a cluster of the
// previous major, after a major upgrade), a standby of backup set's cluster (the latest backup
// when empty), copying only the files whose content differs from the backup's (checksums
// compared), and reports the bytes. restoreCommand, when set, replaces pgBackRest's own.
func (r Runner) RestoreStandbyDelta(ctx context.Context, set, restoreCommand string) (DeltaReport, error) {
	args := []string{"--delta", "--type=standby", "--log-level-console=detail"}
	if set != "" {
		args = append(args, "--set="+set)
	}
	if restoreCommand != "" {
		args = append(args, "--recovery-option=restore_command="+restoreCommand)
	}
	out, err := r.run(ctx, "restore", args...)
	if err != nil {
		return DeltaReport{}, err
	}
	return parseDeltaReport(out), nil
}

// restoredFile is one DETAIL line of a restore: "restore file <path> [- exists and matches
// backup ]([size], …)" or "… (bundle …)"; the size is the first number in the parentheses with its unit.
var restoredFile = regexp.MustCompile(`restore file \S+ (- exists and (?:matches|is zero size)[^(]*)?\(([0-9.]+)([KMGT]?B)`)

func parseDeltaReport(out []byte) DeltaReport {
	var report DeltaReport
	for _, m := range restoredFile.FindAllSubmatch(out, -1) {
		size := parseSize(string(m[2]), string(m[3]))
		if len(m[1]) > 0 {
			report.Kept += size
		} else {
			report.Copied += size
		}
	}
	return report
}

func parseSize(number, unit string) int64 {
	n, _ := strconv.ParseFloat(number, 64)
	scale := map[string]float64{"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}[unit]
	return int64(n * scale)
}

// InfoJSON is `pgbackrest info --output=json` as pgBackRest prints it.
func (r Runner) InfoJSON(ctx context.Context) ([]byte, error) {
	return r.run(ctx, "info", "--output=json")
}

// Info is the repository's description of the stanza.
func (r Runner) Info(ctx context.Context) (StanzaInfo, error) {
	out, err := r.InfoJSON(ctx)
	if err != nil {
		return StanzaInfo{}, err
	}
	return ParseInfo(out, r.Stanza)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// StanzaInfo is the part of `pgbackrest info --output=json` pgpilot reports.
type StanzaInfo struct {
	Name   string `json:"name"`
	Status struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"status"`
	Backups []BackupInfo  `json:"backup"`
	Archive []ArchiveInfo `json:"archive"`
}

// BackupInfo is one backup in the repository.
type BackupInfo struct {
	Label     string `json:"label"`
	Type      string `json:"type"`
	Timestamp struct {
		Start int64 `json:"start"`
		Stop  int64 `json:"stop"`
	} `json:"timestamp"`
	LSN struct {
		Start string `json:"start"`
		Stop  string `json:"stop"`
	} `json:"lsn"`
	Archive struct {
		Start string `json:"start"`
		Stop  string `json:"stop"`
	} `json:"archive"`
	Info struct {
		Size       int64 `json:"size"`
		Repository struct {
			Size int64 `json:"size"`
		} `json:"repository"`
	} `json:"info"`
}

// ArchiveInfo is the WAL range archived for one PostgreSQL version and system.
type ArchiveInfo struct {
	ID  string `json:"id"`
	Min string `json:"min"`
	Max string `json:"max"`
}

// ParseInfo picks stanza out of `pgbackrest info --output=json`.
func ParseInfo(data []byte, stanza string) (StanzaInfo, error) {
	var stanzas []StanzaInfo
	if err := json.Unmarshal(data, &stanzas); err != nil {
		return StanzaInfo{}, fmt.Errorf("parse pgbackrest info: %w", err)
	}
	for _, s := range stanzas {
		if s.Name == stanza {
			return s, nil
		}
	}
	return StanzaInfo{}, fmt.Errorf("pgbackrest info: no stanza %q", stanza)
}
