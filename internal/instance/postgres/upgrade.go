package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"
)

// UpgradeMode is how pg_upgrade moves the user's relation files into the new cluster.
type UpgradeMode string

const (
	// UpgradeLink hard-links the files: the time does not grow with the database's size, and
	// the old cluster cannot run again once the new one has started.
	UpgradeLink UpgradeMode = "link"
	// UpgradeCopy copies them: the old data directory stays as it was, at the cost of the
	// time and the space of a full copy.
	UpgradeCopy UpgradeMode = "copy"
)

// UpgradeStep is how far an upgrade of this instance's data directory got, kept in a file
// beside the data directory so that an agent restarted mid-way knows which way it may go.
type UpgradeStep string

const (
	// UpgradeRunning: pg_upgrade may have run in part. The old cluster is intact (link mode
	// renames the old pg_control only when it starts linking; Revert renames it back).
	UpgradeRunning UpgradeStep = "Running"
	// UpgradeSwapped: pg_upgrade succeeded and the new cluster is in the data directory's
	// place, never started. Going back is still possible.
	UpgradeSwapped UpgradeStep = "Swapped"
	// UpgradeCommitted is the point of no return: the new server is about to start (or has)
	// on the files it shares with the old cluster. Only forward from here.
	UpgradeCommitted UpgradeStep = "Committed"
)

// UpgradeState is the file's content.
type UpgradeState struct {
	From int         `json:"from"`
	To   int         `json:"to"`
	Mode UpgradeMode `json:"mode"`
	Step UpgradeStep `json:"step"`
}

// MajorUpgrade upgrades Old's data directory in place to the major of the binaries in NewBinDir
// with pg_upgrade. Old runs the old major's binaries (Carried) and owns the data directory;
// the new cluster is made beside it (NextDataDir) and swapped into its place, the old one kept
// as PreviousDataDir until the upgrade is finished.
type MajorUpgrade struct {
	Old       *Instance
	NewBinDir string
	Mode      UpgradeMode
}

// NextDataDir is the new major's cluster until it takes the data directory's place.
func (u *MajorUpgrade) NextDataDir() string { return u.Old.DataDir + ".next" }

// PreviousDataDir is the old major's cluster once the new one took its place.
func (u *MajorUpgrade) PreviousDataDir() string { return u.Old.DataDir + ".previous" }

func (u *MajorUpgrade) statePath() string {
	return filepath.Join(filepath.Dir(u.Old.DataDir), "pgpilot-upgrade.json")
}

// newInstance is the new major's tools over dir.
func (u *MajorUpgrade) newInstance(dir string) *Instance {
	return &Instance{BinDir: u.NewBinDir, DataDir: dir, RunAs: u.Old.RunAs, Output: u.Old.Output, Env: u.Old.Env}
}

// State reads the upgrade's progress; nil when no upgrade of this data directory is under way.
func (u *MajorUpgrade) State() (*UpgradeState, error) {
	data, err := os.ReadFile(u.statePath())
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s UpgradeState
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("read %s: %w", u.statePath(), err)
	}
	return &s, nil
}

func (u *MajorUpgrade) record(s UpgradeState) error {
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	temporary := u.statePath() + ".new"
	if err := u.Old.writeOwned(temporary, string(data)); err != nil {
		return err
	}
	if err := os.Rename(temporary, u.statePath()); err != nil {
		return err
	}
	return syncDir(filepath.Dir(u.statePath()))
}

// Prepare makes the new major's empty cluster beside the old one, with the old one's checksum
// setting (pg_upgrade requires the same), unless a previous Prepare made it: initdb is not part
// of the time without writes.
func (u *MajorUpgrade) Prepare(ctx context.Context) error {
	next := u.newInstance(u.NextDataDir())
	if next.Initialised() {
		return nil
	}
	// What an interrupted initdb left.
	if err := os.RemoveAll(next.DataDir); err != nil {
		return err
	}
	checksums, err := u.Old.checksumsEnabled(ctx)
	if err != nil {
		return err
	}
	major, err := next.BinariesMajor(ctx)
	if err != nil {
		return err
	}
	args := []string{"--pgdata=" + next.DataDir, "--username=" + bootstrapSuperuser, "--auth-local=peer",
		"--auth-host=reject", "--encoding=UTF8"}
	args = append(args, InitLocale(major)...)
	switch {
	case checksums:
		args = append(args, "--data-checksums")
	case major >= 18: // on by default from 18
		args = append(args, "--no-data-checksums")
	}
	return next.run(ctx, "initdb", args...)
}

func (i *Instance) checksumsEnabled(ctx context.Context) (bool, error) {
	out, err := i.output(ctx, "pg_controldata", "-D", i.DataDir)
	if err != nil {
		return false, err
	}
	m := regexp.MustCompile(`(?m)^Data page checksum version:\s+(\d+)`).FindSubmatch(out)
	if m == nil {
		return false, errors.New("pg_controldata: no data page checksum version")
	}
	return string(m[1]) != "0", nil
}

// Run upgrades the old cluster, which must have been shut down cleanly as a primary, and puts
// the new cluster in the data directory's place (UpgradeSwapped). Nothing is started.
func (u *MajorUpgrade) Run(ctx context.Context) error {
	from, err := u.Old.BinariesMajor(ctx)
	if err != nil {
		return err
	}
	to, err := u.newInstance("").BinariesMajor(ctx)
	if err != nil {
		return err
	}
	state := UpgradeState{From: from, To: to, Mode: u.Mode, Step: UpgradeRunning}
	if err := u.record(state); err != nil {
		return err
	}
	mode := "--link"
	if u.Mode == UpgradeCopy {
		mode = "--copy"
	}
	if out, err := u.pgUpgrade(ctx, mode); err != nil {
		return fmt.Errorf("%w: %s", err, failureCause(out))
	}
	if err := os.Rename(u.Old.DataDir, u.PreviousDataDir()); err != nil {
		return err
	}
	if err := os.Rename(u.NextDataDir(), u.Old.DataDir); err != nil {
		return err
	}
	state.Step = UpgradeSwapped
	return u.record(state)
}

// Commit passes the point of no return: call it right before the new server's first start.
func (u *MajorUpgrade) Commit() error {
	state, err := u.State()
	if err != nil || state == nil || state.Step != UpgradeSwapped {
		return fmt.Errorf("commit an upgrade at step %v: %w", state, err)
	}
	state.Step = UpgradeCommitted
	return u.record(*state)
}

// Revert brings the old cluster back from any step before the point of no return, as if the
// upgrade had never started (the new cluster removed, the old one in its place with its control
// file), and refuses after it. Reverting when nothing was started is a no-op.
func (u *MajorUpgrade) Revert() error {
	state, err := u.State()
	if err != nil || state == nil {
		return err
	}
	if state.Step == UpgradeCommitted {
		return errors.New("the upgrade passed its point of no return: the new major's server ran on the linked files")
	}
	if err := stopDetachedServers(u.Old.DataDir, u.NextDataDir(), u.PreviousDataDir()); err != nil {
		return err
	}
	if _, err := os.Stat(u.PreviousDataDir()); err == nil {
		if err := os.RemoveAll(u.NextDataDir()); err != nil {
			return err
		}
		// The swap may have stopped between its two renames, leaving no data directory.
		if err := os.Rename(u.Old.DataDir, u.NextDataDir()); err != nil && !os.IsNotExist(err) {
			return err
		}
		if err := os.Rename(u.PreviousDataDir(), u.Old.DataDir); err != nil {
			return err
		}
	}
	// pg_upgrade --link renames the old control file when it starts linking, so that nobody
	// starts the old cluster by mistake afterwards.
	control := filepath.Join(u.Old.DataDir, "global", "pg_control")
	if _, err := os.Stat(control); os.IsNotExist(err) {
		if err := os.Rename(control+".old", control); err != nil {
			return fmt.Errorf("restore the old control file: %w", err)
		}
	}
	if err := os.RemoveAll(u.NextDataDir()); err != nil {
		return err
	}
	return os.Remove(u.statePath())
}

// Recover ends what an interrupted upgrade left, for an agent starting over the data directory:
// before the point of no return the old cluster is put back as it was (Revert), after it the
// upgrade is finished (the new cluster is the data directory already). It returns the step it
// found, "" when no upgrade was under way.
func (u *MajorUpgrade) Recover() (UpgradeStep, error) {
	state, err := u.State()
	if err != nil || state == nil {
		return "", err
	}
	if state.Step == UpgradeCommitted {
		return state.Step, u.Finish()
	}
	return state.Step, u.Revert()
}

// stopDetachedServers stops the servers a killed pg_upgrade left running on dirs: pg_ctl
// detaches the servers it starts, so they outlive pg_upgrade. A fast shutdown first, then
// an immediate one.
func stopDetachedServers(dirs ...string) error {
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
		if err != nil {
			continue
		}
		pid, running := runningPostmaster(data)
		for _, signal := range []syscall.Signal{syscall.SIGINT, syscall.SIGQUIT, syscall.SIGKILL} {
			if !running {
				break
			}
			_ = syscall.Kill(pid, signal)
			for wait := 0; wait < 300 && running; wait++ {
				time.Sleep(100 * time.Millisecond)
				_, running = runningPostmaster(data)
			}
		}
		if running {
			return fmt.Errorf("the server pg_upgrade left on %s (PID %d) does not stop", dir, pid)
		}
	}
	return nil
}

// Finish ends an upgrade whose new server runs: in link mode the previous cluster's directory
// goes (its relation files are the new cluster's, only its catalog is freed); in copy mode it
// is kept, as asked.
func (u *MajorUpgrade) Finish() error {
	state, err := u.State()
	if err != nil || state == nil {
		return err
	}
	if state.Step != UpgradeCommitted {
		return fmt.Errorf("finish an upgrade at step %s", state.Step)
	}
	if state.Mode != UpgradeCopy {
		if err := os.RemoveAll(u.PreviousDataDir()); err != nil {
			return err
		}
	}
	return os.Remove(u.statePath())
}

// newPort is where the new major's server listens while pg_upgrade or the rehearsal runs it,
// beside the old one's.
func (u *MajorUpgrade) newPort() int { return u.Old.Port + 1 }

// pgUpgrade runs the new major's pg_upgrade between the two clusters as the server's user,
// in the directory above them (pg_upgrade writes there as it goes). The carried binaries'
// libraries reach the old server through Old's environment.
func (u *MajorUpgrade) pgUpgrade(ctx context.Context, args ...string) ([]byte, error) {
	args = append([]string{"--old-bindir=" + u.Old.BinDir, "--new-bindir=" + u.NewBinDir,
		"--old-datadir=" + u.Old.DataDir, "--new-datadir=" + u.NextDataDir(),
		"--old-port=" + strconv.Itoa(u.Old.Port), "--new-port=" + strconv.Itoa(u.newPort()),
		"--username=" + bootstrapSuperuser, "--socketdir=" + u.Old.SocketDir,
		// The carried server has no JIT, and pgpilot's preloaded libraries are the new
		// cluster's business once it runs.
		"--old-options=-c jit=off", "--new-options=-c jit=off"}, args...)
	return u.newInstance("").outputIn(ctx, filepath.Dir(u.Old.DataDir), nil, "pg_upgrade", args...)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}
