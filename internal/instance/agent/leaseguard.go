package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// The lease guard runs beside the supervisor loop. While this instance runs as the primary it
// checks the self-fencing rule every LeaseGuardInterval, notes the standbys' replies, and
// starts a renewal of the Lease when one is due. Nothing else the agent does delays a check:
// renewals run in their own goroutine (each up to LeaseRequestTimeout), and a reply query that
// does not answer within a guard interval only makes the next check stricter (no peer noted).
// docs/high-availability.md gives the timing argument this serves.

// guardLease runs until ctx ends.
func (a *Agent) guardLease(ctx context.Context) {
	ticker := time.NewTicker(agentapi.LeaseGuardInterval)
	defer ticker.Stop()
	var conn *pgx.Conn
	defer func() { closeConn(conn) }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if a.fenced() != nil || !a.Instance.Running() || !a.isPrimary() {
			closeConn(conn)
			conn = nil
			continue
		}
		a.applyFenceRule(time.Now())
		conn = a.notePeers(ctx, conn)
		a.renewInBackground(ctx, time.Now())
	}
}

func closeConn(conn *pgx.Conn) {
	if conn != nil {
		_ = conn.Close(context.Background())
	}
}

// applyFenceRule fences a primary whose Lease could not be renewed for LeaseFenceAfter while
// no standby replied within PeerWindow.
func (a *Agent) applyFenceRule(now time.Time) {
	if a.stopRenewing.Load() {
		return // being fenced
	}
	a.stateMu.Lock()
	sincePeer := now.Sub(a.peerSeenAt)
	a.stateMu.Unlock()
	sinceRenewal, transitions := a.keeper().SinceRenewal(now), a.keeper().Current().Transitions
	if mustFence(sinceRenewal, sincePeer) {
		a.logFenceErr(a.fenceNow(fmt.Sprintf("the primary lease was not renewed for %s and no standby replied for %s",
			sinceRenewal.Round(time.Second), sincePeer.Round(time.Second)), transitions))
	}
}

// mustFence is the self-fencing rule: the Lease lapsed (by this agent's clock) and no peer
// vouches for this primary.
func mustFence(sinceRenewal, sincePeer time.Duration) bool {
	return sinceRenewal > agentapi.LeaseFenceAfter && sincePeer > agentapi.PeerWindow
}

// renewInBackground starts a renewal when one is due and none runs; a renewal that finds the
// Lease granted to another instance fences this one.
func (a *Agent) renewInBackground(ctx context.Context, now time.Time) {
	if a.stopRenewing.Load() || !a.renewing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer a.renewing.Store(false)
		l, renewed, err := a.keeper().RenewIfDue(ctx, now)
		switch {
		case renewed && errors.Is(err, ErrLeaseConflict) && l.Holder != a.Config.PodName:
			a.logFenceErr(a.fenceNow(fmt.Sprintf("the primary lease was granted to %q", l.Holder), l.Transitions))
		case renewed && err != nil:
			a.Log.Error(err, "renewing the primary lease failed")
		}
	}()
}

func (a *Agent) logFenceErr(err error) {
	if err != nil {
		a.Log.Error(err, "fencing")
	}
}

// notePeers records when a standby's reply last arrived (any standby's reply time changed
// since the previous look), over conn, which it opens when nil; it returns the connection to
// use next time, nil after a failure.
func (a *Agent) notePeers(ctx context.Context, conn *pgx.Conn) *pgx.Conn {
	local, cancel := context.WithTimeout(ctx, agentapi.LeaseGuardInterval)
	defer cancel()
	var err error
	if conn == nil {
		if conn, err = a.connect(local); err != nil {
			return nil
		}
	}
	replies, err := postgres.StandbyReplies(local, conn)
	if err != nil {
		closeConn(conn)
		return nil
	}
	now := time.Now()
	a.stateMu.Lock()
	defer a.stateMu.Unlock()
	for name, at := range replies {
		if a.peerReplies[name] != at {
			a.peerSeenAt = now
		}
	}
	a.peerReplies = maps.Clone(replies)
	return conn
}

// primaryTick is a running primary's other work every second, over one local connection: tell
// whether PostgreSQL answers (responsive.go) and set synchronous_standby_names.
func (a *Agent) primaryTick(ctx context.Context) {
	if a.fenced() != nil || !a.Instance.Running() || !a.isPrimary() {
		return
	}
	local, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	started := time.Now()
	conn, err := a.connect(local)
	if err == nil {
		defer func() { _ = conn.Close(context.Background()) }()
		err = conn.Ping(local)
	}
	a.responsive.noted(started, err)
	if err == nil && a.fenced() == nil {
		a.syncStandbys(local, conn)
	}
}
