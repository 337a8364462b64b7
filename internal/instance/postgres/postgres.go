// Package postgres runs one local PostgreSQL server for the instance agent: initdb or a clone
// of the primary, the postmaster as a child process, reload, promote and a clean shutdown.
// Everything goes through the server's own binaries; nothing here is simulated.
package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Instance is the local PostgreSQL server of one pod.
type Instance struct {
	// BinDir holds initdb, postgres and pg_basebackup.
	BinDir string
	// DataDir is PGDATA.
	DataDir string
	// ConfigFile is pgpilot's postgresql.conf (from the cluster's ConfigMap).
	ConfigFile string
	// Settings override the configuration file: the agent decides where the data, the socket
	// and the port are, whatever the file says.
	Settings map[string]string
	// Port and SocketDir say how the agent itself connects.
	Port      int
	SocketDir string
	// IdentMap is the content of the server's pg_ident.conf (ident_file), written next to the
	// effective configuration.
	IdentMap string
	// Env is added to the environment of the server and its tools: pgBackRest's repository
	// keys, which archive_command needs and no file may hold.
	Env []string
	// Output receives the server's log.
	Output io.Writer
	// RunAs runs the server binaries as another user. In a pod the agent already runs as the
	// postgres user; tests running as root need it, as PostgreSQL refuses to run as root.
	RunAs *syscall.Credential

	postmaster *exec.Cmd
	// exited is closed when the postmaster has stopped; exitErr is then how it ended.
	exited  chan struct{}
	exitErr error
}

// Initialised reports whether DataDir holds a cluster.
func (i *Instance) Initialised() bool {
	_, err := os.Stat(filepath.Join(i.DataDir, "PG_VERSION"))
	return err == nil
}

// InitDB creates a new cluster: superuser postgres with the given password, data checksums,
// scram-sha-256 for every password, peer authentication on the local socket.
func (i *Instance) InitDB(ctx context.Context, superuserPassword string) error {
	pwfile, err := i.writeSecretFile("pgpilot-initdb-pw", superuserPassword)
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(pwfile) }()
	major, err := i.BinariesMajor(ctx)
	if err != nil {
		return err
	}
	args := append([]string{"--pgdata=" + i.DataDir, "--username=" + bootstrapSuperuser, "--pwfile=" + pwfile,
		"--auth-local=peer", "--auth-host=scram-sha-256", "--data-checksums", "--encoding=UTF8"}, InitLocale(major)...)
	return i.run(ctx, "initdb", args...)
}

// InitLocale is initdb's locale for a new cluster of major: a sort order that no C library or
// ICU update can change, so moving the cluster to an image built on another Debian release
// never leaves an index sorted by other rules. From PostgreSQL 17 on, the builtin provider's
// C.UTF-8 (code point order, Unicode character classes, both PostgreSQL's own); before, the
// C locale (byte order, which for UTF-8 is code point order too; ASCII-only character
// classes).
func InitLocale(major int) []string {
	if major >= 17 {
		return []string{"--locale-provider=builtin", "--locale=C.UTF-8"}
	}
	return []string{"--locale=C"}
}

// CheckMajor refuses a data directory of another major than the server binaries (an image of
// the wrong major in spec.image): PostgreSQL would refuse it too, with a message that does not
// say what to change.
func (i *Instance) CheckMajor(ctx context.Context) error {
	dataMajor, err := i.DataMajor()
	if err != nil {
		return err
	}
	binaries, err := i.BinariesMajor(ctx)
	if err != nil {
		return err
	}
	if dataMajor != binaries {
		return fmt.Errorf("the data directory is PostgreSQL %d but this image's server is PostgreSQL %d: "+
			"run the instance on an image of PostgreSQL %d (spec.image), nothing was changed", dataMajor, binaries, dataMajor)
	}
	return nil
}

// DataMajor is the major of the data directory (PG_VERSION).
func (i *Instance) DataMajor() (int, error) {
	data, err := os.ReadFile(filepath.Join(i.DataDir, "PG_VERSION"))
	if err != nil {
		return 0, fmt.Errorf("read the data directory's major: %w", err)
	}
	major, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0, fmt.Errorf("the data directory's PG_VERSION %q: %w", data, err)
	}
	return major, nil
}

// BinariesMajor is the major version of the server binaries in BinDir (postgres --version).
func (i *Instance) BinariesMajor(ctx context.Context) (int, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(i.BinDir, "postgres"), "--version")
	cmd.Env = append(os.Environ(), i.Env...)
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("postgres --version: %w", err)
	}
	return ParseMajor(string(out))
}

// ParseMajor reads the major from postgres --version's answer, "postgres (PostgreSQL) 17.12
// (Debian 17.12-0+deb13u1)".
func ParseMajor(versionOutput string) (int, error) {
	fields := strings.Fields(versionOutput)
	if len(fields) < 3 {
		return 0, fmt.Errorf("unexpected postgres --version output %q", versionOutput)
	}
	major, err := strconv.Atoi(strings.SplitN(fields[2], ".", 2)[0])
	if err != nil {
		return 0, fmt.Errorf("unexpected postgres --version output %q: %w", versionOutput, err)
	}
	return major, nil
}

// Clone copies the primary's data with pg_basebackup as a streaming standby: standby.signal
// and primary_conninfo are written (-R), and a physical replication slot named slot is
// created on the primary (-C) so it keeps the WAL this standby has not received yet.
// A slot that exists already (a former primary rejoining: the promotion created it) is used as
// it is. The password reaches pg_basebackup in its environment, never on its command line
// (which every process of the pod reads in /proc).
func (i *Instance) Clone(ctx context.Context, primaryConnInfo, password, slot string) error {
	args := []string{"--pgdata=" + i.DataDir, "--dbname=" + primaryConnInfo, "--wal-method=stream",
		"--write-recovery-conf", "--slot=" + slot, "--checkpoint=fast", "--no-password"}
	env := passwordEnv(password)
	out, err := i.outputEnv(ctx, env, "pg_basebackup", append(args, "--create-slot")...)
	if err != nil && bytes.Contains(out, []byte("already exists")) {
		_, err = i.outputEnv(ctx, env, "pg_basebackup", args...)
	}
	return err
}

// passwordEnv passes a password to libpq's tools by the environment, not their arguments.
func passwordEnv(password string) []string {
	if password == "" {
		return nil
	}
	return []string{"PGPASSWORD=" + password}
}

// Start runs the postmaster as a child process and returns once it is started (not ready).
func (i *Instance) Start() error {
	if i.Running() {
		return errors.New("postmaster already running")
	}
	if err := i.removeStaleLockFile(); err != nil {
		return err
	}
	args := []string{"-D", i.DataDir}
	if i.ConfigFile != "" {
		effective, err := i.writeEffectiveConfig()
		if err != nil {
			return err
		}
		args = append(args, "-c", "config_file="+effective)
	}
	cmd := i.command("postgres", args...)
	// The postmaster gets its own process group: a terminal's Ctrl-C must reach the agent,
	// which then shuts PostgreSQL down in order.
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	i.postmaster, i.exited = cmd, make(chan struct{})
	go func() {
		i.exitErr = cmd.Wait()
		close(i.exited)
	}()
	return nil
}

// removeStaleLockFile deletes the postmaster.pid of a postmaster that no longer runs. After a
// container restart the PID namespace is new: the PID in the file may belong to any process of
// the same user, and PostgreSQL (pg_rewind's single-user crash recovery too) would refuse to
// start, "lock file already exists". A PID that is a running postgres process is left alone.
// Its callers, Start and Rewind, have made sure this instance runs no server.
func (i *Instance) removeStaleLockFile() error {
	path := filepath.Join(i.DataDir, "postmaster.pid")
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pid, running := runningPostmaster(data); running {
		return fmt.Errorf("postmaster.pid names process %d, a running postgres: another server uses %s", pid, i.DataDir)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove stale postmaster.pid: %w", err)
	}
	return nil
}

// runningPostmaster is the PID a postmaster.pid file names, and whether it is a running postgres.
func runningPostmaster(lockFile []byte) (int, bool) {
	first, _, _ := strings.Cut(string(lockFile), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0, false
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return pid, err == nil && strings.TrimSpace(string(comm)) == "postgres"
}

// Exited is closed once the postmaster has stopped.
func (i *Instance) Exited() <-chan struct{} { return i.exited }

// ExitErr is how the postmaster ended, once Exited is closed.
func (i *Instance) ExitErr() error {
	<-i.exited
	return i.exitErr
}

// Running reports whether the postmaster is still alive.
func (i *Instance) Running() bool {
	if i.postmaster == nil {
		return false
	}
	select {
	case <-i.exited:
		return false
	default:
		return true
	}
}

// Reload makes the server re-read its configuration files (SIGHUP).
func (i *Instance) Reload() error {
	if !i.Running() {
		return errors.New("postgres is not running")
	}
	if _, err := i.writeEffectiveConfig(); err != nil {
		return err
	}
	return i.postmaster.Process.Signal(syscall.SIGHUP)
}

// writeEffectiveConfig writes the configuration PostgreSQL reads: pgpilot's file with the
// agent's settings appended (the last occurrence of a setting wins). Overriding on the command
// line instead would make every such setting look "pending restart" whenever the file
// disagrees, and the operator would restart instances for nothing.
func (i *Instance) writeEffectiveConfig() (string, error) {
	source, err := os.ReadFile(i.ConfigFile)
	if err != nil {
		return "", fmt.Errorf("read configuration: %w", err)
	}
	settings := maps.Clone(i.Settings)
	if settings == nil {
		settings = map[string]string{}
	}
	settings["port"] = strconv.Itoa(i.Port)
	settings["unix_socket_directories"] = i.SocketDir
	if i.IdentMap != "" {
		identFile := filepath.Join(filepath.Dir(i.DataDir), "pgpilot-ident.conf")
		if err := os.WriteFile(identFile, []byte(i.IdentMap), 0o644); err != nil {
			return "", fmt.Errorf("write ident map: %w", err)
		}
		settings["ident_file"] = identFile
	}
	var b strings.Builder
	b.Write(source)
	b.WriteString("\n# Set by the pgpilot instance agent for this pod.\n")
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		fmt.Fprintf(&b, "%s = '%s'\n", k, strings.ReplaceAll(settings[k], "'", "''"))
	}
	path := filepath.Join(filepath.Dir(i.DataDir), "pgpilot-postgresql.conf")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return "", fmt.Errorf("write effective configuration: %w", err)
	}
	return path, nil
}

// Stop shuts the server down: fast mode first (disconnect clients, checkpoint), immediate mode
// when that takes longer than grace (crash recovery on the next start, no data lost).
func (i *Instance) Stop(grace time.Duration) error {
	if !i.Running() {
		return nil
	}
	_ = i.postmaster.Process.Signal(syscall.SIGINT)
	select {
	case <-i.exited:
		return nil
	case <-time.After(grace):
	}
	_ = i.postmaster.Process.Signal(syscall.SIGQUIT)
	select {
	case <-i.exited:
		return fmt.Errorf("postgres needed an immediate shutdown after %s", grace)
	case <-time.After(10 * time.Second):
		_ = i.postmaster.Process.Kill()
		return errors.New("postgres did not stop; killed")
	}
}

// StopImmediately stops the server at once (SIGQUIT): every session ends without committing
// anything more, and the next start runs crash recovery. This is how a primary is fenced.
func (i *Instance) StopImmediately() error {
	if !i.Running() {
		return nil
	}
	_ = i.postmaster.Process.Signal(syscall.SIGQUIT)
	select {
	case <-i.exited:
		return nil
	case <-time.After(10 * time.Second):
		_ = i.postmaster.Process.Kill()
		<-i.exited
		return errors.New("postgres did not stop on SIGQUIT; killed")
	}
}

// Restart stops the server (fast, then immediate after grace) and starts it again, for
// settings that only take effect at start.
func (i *Instance) Restart(grace time.Duration) error {
	if err := i.Stop(grace); err != nil {
		return err
	}
	return i.Start()
}

// Promote turns a standby into a primary and waits until it accepts writes.
func (i *Instance) Promote(ctx context.Context) error {
	return i.run(ctx, "pg_ctl", "promote", "-D", i.DataDir, "-w", "-t", "60")
}

func (i *Instance) run(ctx context.Context, binary string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(i.BinDir, binary), args...)
	i.prepare(cmd)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", binary, err)
	}
	return nil
}

func (i *Instance) command(binary string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(i.BinDir, binary), args...)
	i.prepare(cmd)
	return cmd
}

func (i *Instance) prepare(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: i.RunAs}
	cmd.Stdout, cmd.Stderr = i.logOutput(), i.logOutput()
	cmd.Env = append(append(os.Environ(), "LC_ALL=C"), i.Env...)
}

func (i *Instance) logOutput() io.Writer {
	if i.Output == nil {
		return os.Stderr
	}
	return i.Output
}

// writeSecretFile writes a file only the server's user can read, next to the data directory.
func (i *Instance) writeSecretFile(name, content string) (string, error) {
	path := filepath.Join(filepath.Dir(i.DataDir), name)
	return path, i.writeOwned(path, content+"\n")
}
