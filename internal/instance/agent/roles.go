package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// Role changes, as the operator orders them for a switchover or a failover. Each holds
// restartMu: the supervisor loop waits for it instead of taking the stopped postmaster for a
// crash, and a restart cannot run in the middle.

// Promote turns this standby into the primary and creates the replication slots the other
// instances will stream through.
func (a *Agent) Promote(ctx context.Context, slots []string) (*agentapi.PromoteResponse, error) {
	if !a.restartMu.TryLock() {
		return nil, agentapi.ErrRestartInProgress
	}
	defer a.restartMu.Unlock()
	if a.isPrimary() {
		return nil, fmt.Errorf("%w: already a primary", agentapi.ErrWrongRole)
	}
	// The operator grants the Lease before it promotes; an order without it is stale.
	lease, err := a.keeper().Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the primary lease: %w", err)
	}
	if lease.Holder != a.Config.PodName {
		return nil, fmt.Errorf("%w: the primary lease names %q", agentapi.ErrWrongRole, lease.Holder)
	}
	if _, err := a.keeper().Renew(ctx); err != nil {
		return nil, fmt.Errorf("renew the primary lease: %w", err)
	}
	a.Log.Info("promoting to primary", "slots", slots)
	if err := a.Instance.Promote(ctx); err != nil {
		return nil, err
	}
	a.setDetachment(nil) // a primary streams from nobody
	conn, err := a.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if err := postgres.EnsureSlots(ctx, conn, slots); err != nil {
		return nil, err
	}
	status, err := postgres.QueryStatus(ctx, conn)
	if err != nil {
		return nil, err
	}
	return &agentapi.PromoteResponse{Timeline: status.Timeline}, nil
}

// Demote shuts this primary down cleanly (fast, immediate after the grace period) and starts
// it again as a standby of the primary host. It reports where its WAL ended, so that the
// operator promotes a standby only once it has replayed that far.
func (a *Agent) Demote(ctx context.Context) (*agentapi.DemoteResponse, error) {
	if !a.restartMu.TryLock() {
		return nil, agentapi.ErrRestartInProgress
	}
	defer a.restartMu.Unlock()
	if !a.isPrimary() {
		return nil, fmt.Errorf("%w: not a primary", agentapi.ErrWrongRole)
	}
	a.Log.Info("demoting to standby", "primary", a.Config.PrimaryHost)
	stopErr := a.Instance.Stop(a.Options.ShutdownGrace)
	control, err := a.Instance.ControlData(ctx)
	if err != nil {
		return nil, errors.Join(stopErr, err)
	}
	if err := a.configureStandby(); err != nil {
		return nil, err
	}
	if err := a.Instance.Start(); err != nil {
		return nil, err
	}
	return &agentapi.DemoteResponse{ShutdownLSN: control.CheckpointLSN, Clean: control.CleanlyShutDown()}, nil
}
