package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// Once the primary runs the new major, the other instances still hold the old major's data.
// After pg_upgrade --link the relation files kept their contents, so a pgBackRest delta restore
// of the new major's first backup over the old directory copies little more than the new
// catalogs; a full clone of the primary is the fallback. A marker beside the data directory
// says a rebuild began: an agent that finds it (the container killed mid-way) clears the
// half-rebuilt directory and clones.

// upgradeRebuild is this instance's rebuild on the new major.
type upgradeRebuild struct {
	mu     sync.Mutex
	result *agentapi.MajorUpgradeRebuildResult
}

// rebuildMarkerPath exists while a rebuild changes the data directory.
func (a *Agent) rebuildMarkerPath() string {
	return filepath.Join(filepath.Dir(a.Config.DataDir), "pgpilot-rebuild.json")
}

// recoverRebuild clears what an interrupted rebuild left, so that the agent clones afresh.
func (a *Agent) recoverRebuild() error {
	if _, err := os.Stat(a.rebuildMarkerPath()); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	a.Log.Info("a rebuild on the new major was interrupted; the data directory is cleared to clone the primary")
	if err := removeContents(a.Config.DataDir); err != nil {
		return fmt.Errorf("clear an interrupted rebuild: %w", err)
	}
	return os.Remove(a.rebuildMarkerPath())
}

// StartMajorUpgradeRebuild starts rebuilding this standby of the carried older major as a standby
// of the upgraded primary, in the background; started false when one runs already.
func (a *Agent) StartMajorUpgradeRebuild(ctx context.Context, req agentapi.MajorUpgradeRebuildRequest) (started bool, err error) {
	u := &a.upgradeRebuild
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.result != nil && u.result.StoppedAt == "" {
		return false, nil
	}
	carried, _, err := a.runningCarried(ctx)
	if errors.Is(err, agentapi.ErrNothingToUpgrade) || err == nil && a.isPrimary() && a.Instance.Running() {
		return false, fmt.Errorf("%w: a rebuild on the new major runs on a standby of the carried major", agentapi.ErrWrongRole)
	}
	if err != nil {
		return false, err
	}
	u.result = &agentapi.MajorUpgradeRebuildResult{StartedAt: time.Now().UTC().Format(time.RFC3339)}
	go a.runRebuild(context.WithoutCancel(ctx), carried, req)
	return true, nil
}

func (a *Agent) runRebuild(ctx context.Context, carried postgres.Carried, req agentapi.MajorUpgradeRebuildRequest) {
	err := a.rebuildOnImageMajor(ctx, carried, req)
	u := &a.upgradeRebuild
	u.mu.Lock()
	defer u.mu.Unlock()
	r := u.result
	r.StoppedAt = time.Now().UTC().Format(time.RFC3339)
	if err != nil {
		r.Error = err.Error()
	}
	a.Log.Info("rebuild on the new major ended", "method", r.Method, "copied", r.Copied, "kept", r.Kept, "reason", r.Reason, "error", r.Error)
}

// rebuildOnImageMajor stops the carried server, rebuilds the data directory on the image's major
// and starts it as a standby. It holds restartMu: the supervisor waits meanwhile.
func (a *Agent) rebuildOnImageMajor(ctx context.Context, carried postgres.Carried, req agentapi.MajorUpgradeRebuildRequest) error {
	a.restartMu.Lock()
	defer a.restartMu.Unlock()
	replayLSN := ""
	if a.Instance.Running() {
		replayLSN, _ = a.replayedLSN(ctx) // none: not a standby, no kit
	}
	if err := a.Instance.Stop(a.Options.ShutdownGrace); err != nil {
		return fmt.Errorf("stop PostgreSQL %d: %w", carried.Major, err)
	}
	if err := writeJSONFile(a.rebuildMarkerPath(), req); err != nil {
		return fmt.Errorf("rebuild marker: %w", err)
	}
	a.Instance.LeaveCarried(carried, a.Config.BinDir)
	method, err := a.rebuildByCheapest(ctx, req, replayLSN)
	if err != nil {
		if method, err = agentapi.RebuildClone, a.rebuildByClone(ctx); err != nil {
			return err
		}
	}
	a.noteRebuild(func(r *agentapi.MajorUpgradeRebuildResult) { r.Method = method })
	if err := a.configureStandby(); err != nil {
		return err
	}
	if err := os.Remove(a.rebuildMarkerPath()); err != nil {
		return err
	}
	return a.Instance.Start()
}

// rebuildByCheapest joins by the primary's follow kit, or restores its backup by delta; the
// reasons of what failed are noted.
func (a *Agent) rebuildByCheapest(ctx context.Context, req agentapi.MajorUpgradeRebuildRequest, replayLSN string) (string, error) {
	var reasons []error
	if req.Kit != nil {
		method, err := a.rebuildByKit(ctx, req.Kit, replayLSN)
		if err == nil {
			return method, nil
		}
		reasons = append(reasons, err)
	}
	method, err := a.rebuildByDelta(ctx, req.BackupLabel)
	if err != nil {
		reasons = append(reasons, err)
	}
	if len(reasons) > 0 {
		a.noteRebuild(func(r *agentapi.MajorUpgradeRebuildResult) { r.Reason = errors.Join(reasons...).Error() })
	}
	return method, err
}

// rebuildByDelta restores backup over the old directory, copying only the files that differ.
func (a *Agent) rebuildByDelta(ctx context.Context, backup string) (string, error) {
	if backup == "" {
		return "", errors.New("the new major has no backup to restore from (no repository, or its first backup failed)")
	}
	runner, err := a.repositoryRunner(agentapi.OwnRepository)
	if err != nil {
		return "", err
	}
	restoreCommand, err := a.restoreCommand(agentapi.OwnRepository)
	if err != nil {
		return "", err
	}
	report, err := runner.RestoreStandbyDelta(ctx, backup, restoreCommand)
	if err != nil {
		return "", fmt.Errorf("delta restore of %s: %w", backup, err)
	}
	a.noteRebuild(func(r *agentapi.MajorUpgradeRebuildResult) { r.Copied, r.Kept = report.Copied, report.Kept })
	return agentapi.RebuildDelta, nil
}

// rebuildByClone replaces the data directory with a copy of the primary.
func (a *Agent) rebuildByClone(ctx context.Context) error {
	if err := removeContents(a.Config.DataDir); err != nil {
		return fmt.Errorf("clear the old major's directory: %w", err)
	}
	conninfo, password := a.cloneSource(a.credentials())
	if err := a.Instance.Clone(ctx, conninfo, password, agentapi.SlotName(a.Config.PodName)); err != nil {
		return fmt.Errorf("clone the primary: %w", err)
	}
	copied, err := directoryBytes(a.Config.DataDir)
	if err != nil {
		return fmt.Errorf("measure the clone: %w", err)
	}
	a.noteRebuild(func(r *agentapi.MajorUpgradeRebuildResult) { r.Copied, r.Kept = copied, 0 })
	return nil
}

// restoreCommand is restore_command through the agent, which holds the repository's keys.
func (a *Agent) restoreCommand(which string) (string, error) {
	self := a.Options.Executable
	if self == "" {
		var err error
		if self, err = os.Executable(); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf(`%s pgbackrest --repository=%s archive-get %%f "%%p"`, self, which), nil
}

func (a *Agent) noteRebuild(note func(*agentapi.MajorUpgradeRebuildResult)) {
	a.upgradeRebuild.mu.Lock()
	defer a.upgradeRebuild.mu.Unlock()
	note(a.upgradeRebuild.result)
}

// MajorUpgradeRebuildResult is a copy of this instance's rebuild, nil before any.
func (a *Agent) MajorUpgradeRebuildResult() *agentapi.MajorUpgradeRebuildResult {
	u := &a.upgradeRebuild
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.result == nil {
		return nil
	}
	copied := *u.result
	return &copied
}

// directoryBytes is the size of the regular files under dir: what a clone of a data directory
// copied.
func directoryBytes(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		total += info.Size()
		return nil
	})
	return total, err
}
