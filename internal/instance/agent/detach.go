package agent

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// A standby vouches for its primary by replying to it: a primary whose Lease lapsed keeps
// running while a standby still replies (fencing.go). When the operator cannot reach the
// primary, it orders every standby to stop streaming (PathDetach), so that the primary loses
// its last peer at a moment the operator knows, rather than when each WAL receiver times out,
// and no receiver can reconnect to it before the Lease is granted elsewhere. The hold ends on
// the operator's order (PathAttach: the Lease was granted, or the primary answered again) or
// DetachHold after its last order. It is kept in memory only: a restarted agent starts its
// server afresh, which takes far longer than the operator's step from an answer to a grant.

// detachment is a standby held off streaming from a primary.
type detachment struct {
	from string
	// stopped is when the WAL receiver was first seen gone for it; until, when the hold ends.
	stopped, until time.Time
}

func (a *Agent) detachment() *detachment {
	a.stateMu.Lock()
	defer a.stateMu.Unlock()
	return a.detached
}

func (a *Agent) setDetachment(d *detachment) {
	a.stateMu.Lock()
	defer a.stateMu.Unlock()
	a.detached = d
}

// Detach stops the WAL receiver (an empty primary_conninfo) and holds it off for DetachHold
// from now; it answers once the receiver is gone. A repeated order only extends the hold.
func (a *Agent) Detach(ctx context.Context, from string) (*agentapi.Status, error) {
	a.restartMu.Lock()
	defer a.restartMu.Unlock()
	if a.fenced() != nil || !a.Instance.Running() || a.isPrimary() {
		return nil, fmt.Errorf("%w: only a running standby detaches", agentapi.ErrWrongRole)
	}
	held := detachment{from: from}
	if d := a.detachment(); d != nil && d.from == from {
		held.stopped = d.stopped
	} else {
		stopped, err := a.stopReceiver(ctx)
		if err != nil {
			return nil, fmt.Errorf("stop the WAL receiver: %w", err)
		}
		held.stopped = stopped
		a.Log.Info("detached: no longer streaming from the primary the operator cannot reach", "from", from)
	}
	held.until = time.Now().Add(cmp.Or(a.Options.DetachHold, agentapi.DetachHold))
	a.setDetachment(&held)
	status := &agentapi.Status{Role: agentapi.RoleReplica}
	held.report(status, time.Now())
	return status, nil
}

// stopReceiver empties primary_conninfo and waits until no WAL receiver runs: from then on
// this standby sends its primary nothing. It returns when it saw the receiver gone.
func (a *Agent) stopReceiver(ctx context.Context) (time.Time, error) {
	conn, err := a.connect(ctx)
	if err != nil {
		return time.Time{}, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := postgres.EnsurePrimaryConnInfo(ctx, conn, ""); err != nil {
		return time.Time{}, err
	}
	for {
		running, err := receiverRuns(ctx, conn)
		if err != nil {
			return time.Time{}, err
		}
		if !running {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func receiverRuns(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var running bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_wal_receiver)`).Scan(&running)
	return running, err
}

// Attach ends the hold: the standby streams from the primary host again.
func (a *Agent) Attach(ctx context.Context) error {
	a.restartMu.Lock()
	defer a.restartMu.Unlock()
	return a.attachLocked(ctx)
}

func (a *Agent) attachLocked(ctx context.Context) error {
	d := a.detachment()
	if d == nil {
		return nil
	}
	if a.Instance.Running() && !a.isPrimary() {
		conn, err := a.connect(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close(context.Background()) }()
		conninfo, err := a.streamingConnInfo(a.credentials())
		if err != nil {
			return err
		}
		if _, err := postgres.EnsurePrimaryConnInfo(ctx, conn, conninfo); err != nil {
			return err
		}
	}
	a.setDetachment(nil)
	a.Log.Info("attached: streaming from the primary host again", "detachedFrom", d.from)
	return nil
}

// endExpiredHold attaches a standby whose hold ran out without a new order.
func (a *Agent) endExpiredHold(ctx context.Context, now time.Time) {
	if d := a.detachment(); d == nil || now.Before(d.until) || !a.restartMu.TryLock() {
		return
	}
	defer a.restartMu.Unlock()
	local, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := a.attachLocked(local); err != nil {
		a.Log.Error(err, "attach after the detach hold ran out; retrying")
	}
}

// report adds to a standby's status whom it is detached from, and since when.
func (d *detachment) report(s *agentapi.Status, now time.Time) {
	s.DetachedFrom, s.DetachedMillis = d.from, now.Sub(d.stopped).Milliseconds()
}
