package postgres

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// The building blocks of switchover, failover and rejoin on one server: what its control file
// says, turning a stopped server into a standby of another, and rewinding a server whose
// timeline diverged from the new primary's.

// ControlData is what pg_controldata reads from a stopped or running server's control file.
type ControlData struct {
	// State is "shut down", "shut down in recovery", "in production", "in archive recovery"…
	State string
	// CheckpointLSN is the latest checkpoint's location: after a clean shutdown, the end of
	// the WAL this server wrote.
	CheckpointLSN string
	// Timeline is the latest checkpoint's timeline.
	Timeline string
	// RedoWALFile is the WAL segment recovery from the latest checkpoint starts in.
	RedoWALFile string
	// WALSegmentBytes is the WAL segment size the cluster was initialised with.
	WALSegmentBytes uint64
	// WALBlockBytes is the size of a WAL page; each begins with a header.
	WALBlockBytes uint64
}

// CleanlyShutDown reports whether the server stopped with a shutdown checkpoint: every WAL
// record it wrote is in that checkpoint's past, and a standby that received up to it lost
// nothing.
func (c ControlData) CleanlyShutDown() bool {
	return c.State == "shut down" || c.State == "shut down in recovery"
}

// ControlData runs pg_controldata on the data directory.
func (i *Instance) ControlData(ctx context.Context) (ControlData, error) {
	out, err := i.output(ctx, "pg_controldata", "-D", i.DataDir)
	if err != nil {
		return ControlData{}, err
	}
	fields := map[string]string{}
	scanner := bufio.NewScanner(bytes.NewReader(out))
	for scanner.Scan() {
		if name, value, ok := strings.Cut(scanner.Text(), ":"); ok {
			fields[strings.TrimSpace(name)] = strings.TrimSpace(value)
		}
	}
	c := ControlData{
		State:         fields["Database cluster state"],
		CheckpointLSN: fields["Latest checkpoint location"],
		Timeline:      fields["Latest checkpoint's TimeLineID"],
		RedoWALFile:   fields["Latest checkpoint's REDO WAL file"],
	}
	c.WALSegmentBytes, _ = strconv.ParseUint(fields["Bytes per WAL segment"], 10, 64)
	c.WALBlockBytes, _ = strconv.ParseUint(fields["WAL block size"], 10, 64)
	if c.State == "" || c.CheckpointLSN == "" {
		return c, fmt.Errorf("pg_controldata: unexpected output")
	}
	return c, nil
}

// ConfigureStandby makes a stopped server start as a standby of the server primaryConnInfo
// names, streaming through slot (none when empty): standby.signal, and the connection in
// postgresql.auto.conf, where pg_basebackup puts it and where ALTER SYSTEM changes it later.
// Recovery follows the primary's latest timeline (the default), so a standby of the old primary
// follows a promoted one.
func (i *Instance) ConfigureStandby(primaryConnInfo, slot string) error {
	if i.Running() {
		return errors.New("configure standby: the server is running")
	}
	auto := filepath.Join(i.DataDir, "postgresql.auto.conf")
	existing, err := os.ReadFile(auto)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("configure standby: %w", err)
	}
	// The last occurrence of a setting wins; earlier ones are dropped to keep the file readable.
	var kept []string
	for _, line := range strings.Split(strings.TrimRight(string(existing), "\n"), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch strings.TrimSpace(name) {
		case "primary_conninfo", "primary_slot_name":
			continue
		}
		if line != "" {
			kept = append(kept, line)
		}
	}
	kept = append(kept, "primary_conninfo = "+quoteLiteral(primaryConnInfo))
	if slot != "" {
		kept = append(kept, "primary_slot_name = "+quoteLiteral(slot))
	}
	if err := i.writeOwned(auto, strings.Join(kept, "\n")+"\n"); err != nil {
		return fmt.Errorf("configure standby: %w", err)
	}
	if err := i.writeOwned(filepath.Join(i.DataDir, "standby.signal"), ""); err != nil {
		return fmt.Errorf("configure standby: %w", err)
	}
	return nil
}

// IsStandby reports whether the server starts (or runs) as a standby.
func (i *Instance) IsStandby() bool {
	_, err := os.Stat(filepath.Join(i.DataDir, "standby.signal"))
	return err == nil
}

var divergedAt = regexp.MustCompile(`servers diverged at WAL location ([0-9A-F]+/[0-9A-F]+) on timeline (\d+)`)

// Rewind is what pg_rewind did to a server whose timeline diverged from the new primary's.
type Rewind struct {
	// DivergedAt is where the timelines parted: the server's WAL from there to its own end was
	// never on the new primary and is gone from this server now.
	DivergedAt string
	// NoRewindNeeded: the server had written nothing the new primary lacks.
	NoRewindNeeded bool
}

// ErrRewindSourceUnreachable: the rewind did not start, the source did not answer; try again
// later rather than giving up on the data directory.
var ErrRewindSourceUnreachable = errors.New("rewind: cannot connect to the source")

// Rewind synchronises the stopped server with the running server sourceConnInfo names (a
// superuser connection, its password given apart: pg_rewind gets it in its environment), so
// that it can follow it as a standby without a new clone. It needs
// data checksums or wal_log_hints (pgpilot has both). pg_rewind brings a server that crashed to
// a clean state first.
func (i *Instance) Rewind(ctx context.Context, sourceConnInfo, password string) (Rewind, error) {
	if i.Running() {
		return Rewind{}, errors.New("rewind: the server is running")
	}
	// A just-promoted source's control file still names its old timeline until its first
	// checkpoint, and pg_rewind (before PostgreSQL 16) would find nothing to rewind.
	config, err := pgx.ParseConfig(sourceConnInfo)
	if err != nil {
		return Rewind{}, fmt.Errorf("rewind: %w", err)
	}
	config.Password = password
	source, err := pgx.ConnectConfig(ctx, config)
	if err != nil {
		return Rewind{}, fmt.Errorf("%w: %w", ErrRewindSourceUnreachable, err)
	}
	_, err = source.Exec(ctx, "CHECKPOINT")
	_ = source.Close(ctx)
	if err != nil {
		return Rewind{}, fmt.Errorf("rewind: checkpoint the source: %w", err)
	}
	// pg_rewind first runs a crashed target's recovery in single-user mode, which a stale lock
	// file would stop.
	if err := i.removeStaleLockFile(); err != nil {
		return Rewind{}, err
	}
	out, err := i.outputEnv(ctx, passwordEnv(password), "pg_rewind", "--target-pgdata="+i.DataDir, "--source-server="+sourceConnInfo)
	if err != nil {
		return Rewind{}, err
	}
	var r Rewind
	if m := divergedAt.FindSubmatch(out); m != nil {
		r.DivergedAt = string(m[1])
	}
	r.NoRewindNeeded = bytes.Contains(out, []byte("no rewind required"))
	return r, nil
}

// output runs one of the server's binaries and returns what it printed, which also goes to
// the server's log output.
func (i *Instance) output(ctx context.Context, binary string, args ...string) ([]byte, error) {
	return i.outputEnv(ctx, nil, binary, args...)
}

// outputEnv is output with more environment variables (a password).
func (i *Instance) outputEnv(ctx context.Context, env []string, binary string, args ...string) ([]byte, error) {
	return i.outputIn(ctx, "", env, binary, args...)
}

// outputIn is outputEnv run in the directory dir ("": the agent's own).
func (i *Instance) outputIn(ctx context.Context, dir string, env []string, binary string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(i.BinDir, binary), args...)
	i.prepare(cmd)
	cmd.Dir = dir
	cmd.Env = append(cmd.Env, env...)
	// pg_basebackup streams WAL from a forked child that holds the output pipe: cancelled, the
	// whole group goes, or Run would wait for that pipe forever (an agent stopped in a clone
	// hung so in a test).
	cmd.SysProcAttr.Setpgid = true
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	err := cmd.Run()
	_, _ = i.logOutput().Write(buf.Bytes())
	if err != nil {
		return buf.Bytes(), fmt.Errorf("%s: %w: %s", binary, err, errorLine(buf.Bytes()))
	}
	return buf.Bytes(), nil
}

// errorLine is the last line of a failed tool's output that says what went wrong: the last
// "error:" or "FATAL:" one, not the hint that follows it.
func errorLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "error:") || strings.Contains(lines[i], "FATAL:") {
			return strings.TrimSpace(lines[i])
		}
	}
	return lines[len(lines)-1]
}

func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// writeOwned writes a file in the data directory as the server's user owns it, readable by that
// user alone.
func (i *Instance) writeOwned(path, content string) error {
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return err
	}
	return i.chown(path)
}

// ReplicationPassfile is the libpq password file a standby's WAL receiver reads the replication
// password from: primary_conninfo names it instead of holding the password, so no statement,
// postgresql.auto.conf or backup carries it. It lives beside the data directory, not in it, so
// base backups do not copy it.
func (i *Instance) ReplicationPassfile() string {
	return filepath.Join(filepath.Dir(i.DataDir), "pgpilot-replication.pgpass")
}

// WriteReplicationPassfile writes user's password for any host into ReplicationPassfile, readable
// by the server's user only (libpq ignores a password file others can read), renamed into place
// so that a WAL receiver connecting meanwhile reads the old or the new password, never half.
func (i *Instance) WriteReplicationPassfile(user, password string) error {
	escape := strings.NewReplacer(`\`, `\\`, `:`, `\:`)
	path := i.ReplicationPassfile()
	temporary := path + ".new"
	if err := i.writeOwned(temporary, "*:*:*:"+escape.Replace(user)+":"+escape.Replace(password)+"\n"); err != nil {
		return fmt.Errorf("write replication passfile: %w", err)
	}
	if err := os.Rename(temporary, path); err != nil {
		return fmt.Errorf("write replication passfile: %w", err)
	}
	return nil
}

// WritePrivateFiles writes files (name → content) into dir, readable by the server's user only,
// as PostgreSQL and libpq require of private keys. Each file is renamed into place, so that a
// reload never reads half a certificate.
func (i *Instance) WritePrivateFiles(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := i.chown(dir); err != nil {
		return err
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := i.writeOwned(path+".new", string(content)); err != nil {
			return err
		}
		if err := os.Rename(path+".new", path); err != nil {
			return err
		}
	}
	return nil
}
