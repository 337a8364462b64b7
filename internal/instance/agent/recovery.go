package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/pgbackrest"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// restoreMarkerPath exists from the start of a restore until the restored server has promoted:
// an agent that finds it restores again instead of starting a half-recovered data directory.
func (a *Agent) restoreMarkerPath() string {
	return filepath.Join(filepath.Dir(a.Config.DataDir), "pgpilot-restore.json")
}

// restoring says whether a restore started and did not finish.
func (a *Agent) restoring() bool {
	_, err := os.Stat(a.restoreMarkerPath())
	return err == nil
}

// recover creates the data directory from the recovery repository: pgBackRest restores the
// backup that reaches the target, the server replays archived WAL up to it and promotes onto
// a new timeline, and the recovery's settings are removed before the server stops again.
func (a *Agent) recover(ctx context.Context, rec *agentapi.Recovery) error {
	if err := writeJSONFile(a.restoreMarkerPath(), rec); err != nil {
		return fmt.Errorf("restore marker: %w", err)
	}
	backup, err := writeRepositoryConfigs(a.Config, a.Instance.RunAs)
	if err != nil {
		return err
	}
	runner, err := a.repositoryRunner(agentapi.RecoveryRepository)
	if err != nil {
		return err
	}
	restoreCommand, err := a.restoreCommand(agentapi.RecoveryRepository)
	if err != nil {
		return err
	}
	if err := mkdirOwned(a.Config.DataDir, a.Instance.RunAs); err != nil {
		return err
	}
	// What an interrupted restore left (even a postmaster.pid) makes pgBackRest refuse the
	// directory; none of it is more than the backup and the archive already hold.
	if err := removeContents(a.Config.DataDir); err != nil {
		return fmt.Errorf("clear an interrupted restore: %w", err)
	}
	a.Log.Info("restoring from the recovery repository", "path", rec.Repository.Path, "target", rec.Target.Type, "value", rec.Target.Value)
	value := rec.Target.Value
	if at, err := time.Parse(time.RFC3339Nano, value); err == nil && rec.Target.Type == agentapi.RecoveryTargetTime {
		value = pgbackrest.TimeTarget(at)
	}
	target := pgbackrest.Target{Type: rec.Target.Type, Value: value, Exclusive: rec.Target.Exclusive,
		// WAL comes from the source's repository through the agent, which holds its keys.
		RestoreCommand: restoreCommand}
	if err := runner.Restore(ctx, target); err != nil {
		return err
	}
	if err := a.replayToTarget(ctx, backup.Repository != nil); err != nil {
		return err
	}
	return os.Remove(a.restoreMarkerPath())
}

// replayToTarget runs the restored server until it has promoted, then stops it.
//
// It runs without archive_command: the new timeline's history file and first segments wait in
// pg_wal (marked ready) for the server the agent starts next. Before it stops, the promoted
// server gets the cluster's own repository's stanza, so that the next server's first archive
// push finds it: one that does not fails three times and sleeps a minute (the archiver's
// rule), which is a minute of WAL unarchived after every restore.
func (a *Agent) replayToTarget(ctx context.Context, ownRepository bool) error {
	restoreSetting := a.overrideSetting("archive_command", "")
	defer restoreSetting()
	if err := a.Instance.Start(); err != nil {
		return err
	}
	stop := func(err error) error { return errors.Join(err, a.Instance.Stop(a.Options.ShutdownGrace)) }
	for {
		select {
		case <-ctx.Done():
			return stop(ctx.Err())
		case <-a.Instance.Exited():
			return fmt.Errorf("postgres stopped during recovery (is the target after the end of the archived WAL?): %v", a.Instance.ExitErr())
		case <-time.After(time.Second):
		}
		conn, err := a.connect(ctx)
		if err != nil {
			continue
		}
		var inRecovery bool
		err = conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery)
		if err == nil && !inRecovery {
			err = postgres.ResetRecoverySettings(ctx, conn)
			_ = conn.Close(ctx)
			if err != nil {
				return stop(err)
			}
			a.Log.Info("recovery reached its target and promoted")
			if ownRepository {
				// Failing here is not fatal: keepRepository retries once the server runs.
				a.checkRepository(ctx)
			}
			// Promoted and durable: an immediate shutdown only means crash recovery at the
			// next start, not a restore to do again.
			if err := a.Instance.Stop(a.Options.ShutdownGrace); err != nil {
				a.Log.Error(err, "stopping the restored server")
			}
			return nil
		}
		_ = conn.Close(ctx)
	}
}

// overrideSetting sets a server setting for the next starts and returns what puts it back.
func (a *Agent) overrideSetting(name, value string) (restore func()) {
	old, had := a.Instance.Settings[name]
	a.Instance.Settings[name] = value
	return func() {
		if had {
			a.Instance.Settings[name] = old
		} else {
			delete(a.Instance.Settings, name)
		}
	}
}
