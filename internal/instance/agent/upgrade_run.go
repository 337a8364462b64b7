package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/pgbackrest"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// The standby the operator chose carries the cluster to the new major: the old primary stopped
// cleanly and this standby replayed all of it, so promoting it on the old major loses nothing.
// It is then stopped and upgraded in place; until the new server's first start a failure puts
// the old major back, promoted: the cluster goes on as after a switchover. The old primary's
// directory is not touched either way.

// upgradeRun is this instance's major upgrade.
type upgradeRun struct {
	mu     sync.Mutex
	result *agentapi.MajorUpgradeResult
}

func (u *upgradeRun) step(step string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.result.Step = step
}

// StartMajorUpgrade checks that this instance may carry the cluster to the new major and starts
// the upgrade in the background; started false when one is under way already.
func (a *Agent) StartMajorUpgrade(ctx context.Context, req agentapi.MajorUpgradeRequest) (started bool, err error) {
	u := &a.upgradeRun
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.result != nil && u.result.StoppedAt == "" {
		return false, nil
	}
	carried, to, err := a.runningCarried(ctx)
	if errors.Is(err, agentapi.ErrNothingToUpgrade) || err == nil && (a.isPrimary() || !a.Instance.Running()) {
		return false, fmt.Errorf("%w: a major upgrade runs on a running standby of the carried major", agentapi.ErrWrongRole)
	}
	if err != nil {
		return false, err
	}
	// The operator grants the Lease first, as for a promotion; an order without it is stale.
	lease, err := a.keeper().Read(ctx)
	if err != nil {
		return false, fmt.Errorf("read the primary lease: %w", err)
	}
	if lease.Holder != a.Config.PodName {
		return false, fmt.Errorf("%w: the primary lease names %q", agentapi.ErrWrongRole, lease.Holder)
	}
	u.result = &agentapi.MajorUpgradeResult{From: carried.Major, To: to, Mode: req.Mode,
		Step: agentapi.UpgradeStepPromoting, StartedAt: time.Now().UTC().Format(time.RFC3339)}
	go a.runMajorUpgrade(context.WithoutCancel(ctx), carried, req)
	return true, nil
}

func (a *Agent) runMajorUpgrade(ctx context.Context, carried postgres.Carried, req agentapi.MajorUpgradeRequest) {
	err := a.upgradeToImageMajor(ctx, carried, req)
	if err == nil {
		err = a.catchUpAfterMajorUpgrade(ctx)
	}
	a.endUpgradeRun(err)
}

// endUpgradeRun records that the upgrade's job stopped, failed with err unless nil (a revert
// keeps its step).
func (a *Agent) endUpgradeRun(err error) {
	u := &a.upgradeRun
	u.mu.Lock()
	defer u.mu.Unlock()
	r := u.result
	r.StoppedAt = time.Now().UTC().Format(time.RFC3339)
	if err != nil {
		r.Error = err.Error()
		if r.Step != agentapi.UpgradeStepReverted {
			r.Step = agentapi.UpgradeStepFailed
		}
	}
	a.Log.Info("major upgrade ended", "from", r.From, "to", r.To, "step", r.Step, "error", r.Error)
}

// upgradeToImageMajor promotes, stops, upgrades and starts this instance as the new major's
// primary, or puts the old major back, promoted, when it fails before the point of no return.
// It holds restartMu: the supervisor waits instead of taking the stopped server for a crash.
func (a *Agent) upgradeToImageMajor(ctx context.Context, carried postgres.Carried, req agentapi.MajorUpgradeRequest) error {
	a.restartMu.Lock()
	defer a.restartMu.Unlock()
	u := &a.upgradeRun
	// A standby's agent keeps no renewal of its own: the lease guard would fence the new
	// primary at once.
	if _, err := a.keeper().Renew(ctx); err != nil {
		return fmt.Errorf("renew the primary lease: %w", err)
	}
	if err := a.Instance.Promote(ctx); err != nil {
		return fmt.Errorf("promote on PostgreSQL %d: %w", carried.Major, err)
	}
	a.setDetachment(nil)
	if err := a.Instance.Stop(a.Options.ShutdownGrace); err != nil {
		return fmt.Errorf("stop PostgreSQL %d: %w", carried.Major, err)
	}
	u.step(agentapi.UpgradeStepUpgrading)
	upgrade := a.majorUpgrade()
	upgrade.Mode = postgres.UpgradeMode(req.Mode)
	started := time.Now()
	fromLSN, untilLSN, kitErr := a.followKitCheck(ctx, upgrade)
	err := upgrade.Prepare(ctx)
	if err == nil {
		err = upgrade.Run(ctx)
	}
	if err == nil {
		a.makeFollowKit(ctx, upgrade, fromLSN, untilLSN, kitErr)
	}
	u.mu.Lock()
	u.result.PgUpgradeMillis = time.Since(started).Milliseconds()
	u.mu.Unlock()
	if err != nil {
		return a.revertMajorUpgrade(ctx, upgrade, err, req.Slots)
	}
	if err := upgrade.Commit(); err != nil {
		return a.revertMajorUpgrade(ctx, upgrade, err, req.Slots)
	}
	u.step(agentapi.UpgradeStepPointOfNoReturn)
	a.Instance.LeaveCarried(carried, a.Config.BinDir)
	if err := a.startHoldingTheLease(ctx); err != nil {
		return fmt.Errorf("start the new major (past the point of no return: only forward): %w", err)
	}
	return a.openAfterMajorUpgrade(ctx, upgrade, req.Slots)
}

// revertMajorUpgrade puts the old major back, promoted, with the slots the others stream
// through, after cause.
func (a *Agent) revertMajorUpgrade(ctx context.Context, upgrade *postgres.MajorUpgrade, cause error, slots []string) error {
	if err := errors.Join(upgrade.Revert(), os.RemoveAll(upgrade.FollowKitDir())); err != nil {
		return errors.Join(cause, fmt.Errorf("revert: %w", err))
	}
	a.upgradeRun.mu.Lock()
	a.upgradeRun.result.Step, a.upgradeRun.result.FollowKit = agentapi.UpgradeStepReverted, false
	a.upgradeRun.mu.Unlock()
	if err := a.startHoldingTheLease(ctx); err != nil {
		return errors.Join(cause, fmt.Errorf("start the old major again: %w", err))
	}
	if err := a.ensureSlotsOnceAccepting(ctx, slots); err != nil {
		return errors.Join(cause, fmt.Errorf("the old major's slots: %w", err))
	}
	return fmt.Errorf("the upgrade failed before its point of no return, the old major runs again: %w", cause)
}

// startHoldingTheLease renews the primary Lease, then starts the server as the primary. The
// last renewal came before pg_upgrade, which can run longer than a Lease may go unrenewed (a
// large database, a busy node), and with no standby streaming yet nothing else vouches for the
// new primary: the lease guard would fence it as it starts. A renewal that fails leaves the
// decision to the guard's rule, as for any primary.
func (a *Agent) startHoldingTheLease(ctx context.Context) error {
	if _, err := a.keeper().Renew(ctx); err != nil {
		a.Log.Error(err, "renewing the primary lease before the upgraded server starts; the lease guard decides")
	}
	return a.Instance.Start()
}

// ensureSlotsOnceAccepting makes the replication slots once the server just started accepts
// connections.
func (a *Agent) ensureSlotsOnceAccepting(ctx context.Context, slots []string) error {
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := a.connectOnceAccepting(waitCtx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(ctx) }()
	return postgres.EnsureSlots(ctx, conn, slots)
}

// openAfterMajorUpgrade: the Lease renewed, the slots the others stream through, the previous
// directory removed; the new primary takes writes.
func (a *Agent) openAfterMajorUpgrade(ctx context.Context, upgrade *postgres.MajorUpgrade, slots []string) error {
	if err := a.ensureSlotsOnceAccepting(ctx, slots); err != nil {
		return fmt.Errorf("the new major's server: %w", err)
	}
	if _, err := a.keeper().Renew(ctx); err != nil {
		return fmt.Errorf("renew the primary lease: %w", err)
	}
	if err := upgrade.Finish(); err != nil {
		return err
	}
	a.upgradeRun.step(agentapi.UpgradeStepStarted)
	return nil
}

// catchUpAfterMajorUpgrade upgrades the repository's stanza, takes the new major's first full
// backup (what the other instances are rebuilt from), updates the extensions and rebuilds the
// statistics, without holding the server: it takes writes meanwhile.
func (a *Agent) catchUpAfterMajorUpgrade(ctx context.Context) error {
	label, backupErr := a.backUpNewMajor(ctx)
	a.upgradeRun.mu.Lock()
	a.upgradeRun.result.BackupLabel = label
	if backupErr != nil {
		a.upgradeRun.result.BackupError = backupErr.Error()
		a.Log.Error(backupErr, "the new major's first backup; the other instances are cloned in full")
	}
	a.upgradeRun.mu.Unlock()
	updated, err := postgres.UpdateExtensions(ctx, a.connectTo)
	a.upgradeRun.mu.Lock()
	a.upgradeRun.result.ExtensionsUpdated = updated
	a.upgradeRun.mu.Unlock()
	if err != nil {
		return err
	}
	if err := a.Instance.RebuildStatistics(ctx); err != nil {
		return err
	}
	a.removeFollowKitLater()
	a.upgradeRun.step(agentapi.UpgradeStepDone)
	return nil
}

// stanzaUpgradeAttempts bounds the tries of stanza-upgrade.
const stanzaUpgradeAttempts = 5

// backUpNewMajor upgrades the stanza (archiving is refused until then) and takes a full backup;
// "" without error when the cluster has no repository.
func (a *Agent) backUpNewMajor(ctx context.Context) (string, error) {
	b, err := agentapi.ReadBackupConfig(a.Config.ConfigDir)
	if err != nil || b.Repository == nil {
		return "", err
	}
	runner, err := a.repositoryRunner(agentapi.OwnRepository)
	if err != nil {
		return "", err
	}
	// The repository loop may hold pgBackRest's lock for a moment (its stanza-create fails
	// until the stanza is upgraded): a few tries.
	for attempt := 1; ; attempt++ {
		err := runner.StanzaUpgrade(ctx)
		if err == nil {
			break
		}
		if attempt == stanzaUpgradeAttempts {
			return "", fmt.Errorf("stanza-upgrade: %w", err)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(3 * time.Second):
		}
	}
	started := time.Now()
	if err := runner.Backup(ctx, pgbackrest.Full); err != nil {
		return "", fmt.Errorf("full backup: %w", err)
	}
	backups, err := a.readBackups(ctx, runner)
	if err != nil {
		return "", err
	}
	record := newestSince(backups, started)
	if record == nil {
		return "", errors.New("pgbackrest finished but the repository lists no backup started since")
	}
	a.Log.Info("the new major's first backup", "label", record.Label)
	return record.Label, nil
}

// MajorUpgradeResult is a copy of this instance's major upgrade, nil before any.
func (a *Agent) MajorUpgradeResult() *agentapi.MajorUpgradeResult {
	u := &a.upgradeRun
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.result == nil {
		return nil
	}
	copied := *u.result
	copied.ExtensionsUpdated = append([]string(nil), u.result.ExtensionsUpdated...)
	return &copied
}
