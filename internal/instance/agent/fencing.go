package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// The primary Lease decides, not the data directory: PostgreSQL runs as a primary only on the
// instance the Lease names, while its agent keeps renewing it. A primary that loses the Lease
// (granted elsewhere) or cannot renew it for LeaseFenceAfter with no standby still replying
// stops at once (fenced). A fenced instance stays down, across container restarts (a marker
// file beside PGDATA), until the Lease is granted again: to it (it starts as the primary) or
// to another instance (it rewinds, or re-clones, and follows).

// fence is why PostgreSQL is held down, and the Lease's grant count at the time: a later
// grant is the operator's answer.
type fence struct {
	Reason      string `json:"reason"`
	Transitions int32  `json:"transitions"`
}

// fenceMarkerPath is beside PGDATA, on the data volume: it survives a container restart and is
// never copied into a clone.
func (a *Agent) fenceMarkerPath() string {
	return filepath.Join(filepath.Dir(a.Instance.DataDir), "pgpilot-fence.json")
}

func (a *Agent) fenced() *fence {
	a.stateMu.Lock()
	defer a.stateMu.Unlock()
	return a.fence
}

// rejoinRecordPath keeps the last rejoin beside PGDATA: the agent reports it until the next,
// across restarts, so the operator announces what only the old primary had even if the agent
// restarted right after rejoining.
func (a *Agent) rejoinRecordPath() string {
	return filepath.Join(filepath.Dir(a.Instance.DataDir), "pgpilot-rejoin.json")
}

// holdDown records the fence (file first: a crash after it still finds it) and remembers it.
func (a *Agent) holdDown(f fence) error {
	if err := writeJSONFile(a.fenceMarkerPath(), f); err != nil {
		return fmt.Errorf("write fence marker: %w", err)
	}
	a.stateMu.Lock()
	a.fence = &f
	a.stateMu.Unlock()
	return nil
}

func (a *Agent) liftFence() error {
	if err := os.Remove(a.fenceMarkerPath()); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove fence marker: %w", err)
	}
	a.stateMu.Lock()
	a.fence = nil
	a.stateMu.Unlock()
	a.responsive.answered()
	a.stopRenewing.Store(false)
	return nil
}

// readFenceMarker is the fence an earlier run recorded, nil when there is none. A marker that
// cannot be read still holds the instance down (only the Lease lets it run again): an agent
// that refused to start over it would never rejoin.
func (a *Agent) readFenceMarker() (*fence, error) {
	f := &fence{}
	found, err := readJSONFile(a.fenceMarkerPath(), f)
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) { // what json.Unmarshal says of an empty or cut-off file
		return &fence{Reason: fmt.Sprintf("the fence marker of an earlier run is unreadable (%v)", err)}, nil
	}
	if !found || err != nil {
		return nil, err
	}
	return f, nil
}

// readRejoinRecord loads the last rejoin an earlier run of the agent recorded.
func (a *Agent) readRejoinRecord() error {
	rejoined := &agentapi.Rejoin{}
	if found, err := readJSONFile(a.rejoinRecordPath(), rejoined); !found || err != nil {
		return err
	}
	a.stateMu.Lock()
	a.rejoined = rejoined
	a.stateMu.Unlock()
	return nil
}

// writeJSONFile replaces path with v's JSON atomically (a file beside it, synced, renamed over
// it): a process killed while it writes, as a pod's may be on its way out, leaves the old
// content or the new, never a truncated file.
func writeJSONFile(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	err = errors.Join(err, f.Sync(), f.Close())
	if err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readJSONFile decodes path into v; found is false when it does not exist.
func readJSONFile(path string, v any) (found bool, err error) {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	return true, nil
}

// fenceNow stops a running primary immediately and holds it down. Immediate, not fast or
// smart: no session may commit anything after this instance stopped being allowed to.
func (a *Agent) fenceNow(reason string, transitions int32) error {
	a.restartMu.Lock()
	defer a.restartMu.Unlock()
	return a.fenceLocked(reason, transitions)
}

func (a *Agent) fenceLocked(reason string, transitions int32) error {
	if a.fenced() != nil {
		return nil
	}
	if frozen := a.responsive.unresponsive(time.Now()); frozen != "" {
		// Killed before the marker is written: on a hung disk the write may hang too, and the
		// operator moves on only once this answers (or the Lease, no longer renewed, lapses).
		a.Log.Info("fencing: killing every process of the unresponsive postgres", "reason", reason, "unresponsive", frozen)
		a.stopRenewing.Store(true)
		killErr := a.Instance.Kill()
		return errors.Join(killErr, a.holdDown(fence{Reason: reason + "; " + frozen, Transitions: transitions}))
	}
	a.Log.Info("fencing: stopping postgres immediately", "reason", reason)
	markErr := a.holdDown(fence{Reason: reason, Transitions: transitions})
	stopErr := a.Instance.StopImmediately()
	return errors.Join(markErr, stopErr)
}

// Fence is the operator's order (PathFence): a primary stops at once and waits for the Lease.
func (a *Agent) Fence(ctx context.Context) (*agentapi.Status, error) {
	a.restartMu.Lock()
	defer a.restartMu.Unlock()
	if a.fenced() == nil {
		if a.Instance.Running() && !a.isPrimary() {
			return nil, fmt.Errorf("%w: a standby needs no fencing", agentapi.ErrWrongRole)
		}
		if err := a.fenceLocked("fenced by the operator", a.keeper().Current().Transitions); err != nil {
			return nil, err
		}
	}
	return a.fencedStatus(), nil
}

func (a *Agent) fencedStatus() *agentapi.Status {
	f := a.fenced()
	if f == nil {
		return nil
	}
	return &agentapi.Status{Fenced: true, FencedReason: f.Reason, LeaseTransitions: f.Transitions,
		Rejoined: a.lastRejoin(), LogNotices: a.logNotices()}
}

// keeper is the agent's LeaseKeeper, over Leases, for this instance.
func (a *Agent) keeper() *LeaseKeeper {
	a.keeperOnce.Do(func() { a.leaseKeeper = &LeaseKeeper{Store: a.Leases, Holder: a.Config.PodName} })
	return a.leaseKeeper
}

// readLease reads the Lease, retrying until the API server answers: without it the agent
// cannot know what it may start as.
func (a *Agent) readLease(ctx context.Context) (Lease, error) {
	for attempt := 1; ; attempt++ {
		l, err := a.keeper().Read(ctx)
		if err == nil {
			return l, nil
		}
		a.Log.Error(err, "cannot read the primary lease; PostgreSQL waits", "attempt", attempt)
		select {
		case <-ctx.Done():
			return Lease{}, ctx.Err()
		case <-time.After(min(time.Duration(attempt)*time.Second, 5*time.Second)):
		}
	}
}

// startAsLeaseSays starts PostgreSQL in the role the Lease allows: a standby as a standby; a
// primary only when the Lease names it and it renewed the Lease first; a primary the Lease no
// longer names rejoins as a standby; otherwise it waits, fenced.
func (a *Agent) startAsLeaseSays(ctx context.Context, l Lease) error {
	if err := a.readRejoinRecord(); err != nil {
		return err
	}
	marker, err := a.readFenceMarker()
	if err != nil {
		return err
	}
	if marker != nil {
		a.stateMu.Lock()
		a.fence = marker
		a.stateMu.Unlock()
		a.Log.Info("fenced before this start; waiting for the primary lease", "reason", marker.Reason)
		return nil
	}
	if a.Instance.IsStandby() {
		// With the connection of now: a connection string kept from before a rotation (or
		// from an older release) would be corrected a tick later, restarting the WAL receiver,
		// and one restarting while the primary is fenced misses the end of its WAL.
		if err := a.configureStandby(); err != nil {
			return err
		}
		return a.Instance.Start()
	}
	switch l.Holder {
	case a.Config.PodName:
		if current, err := a.keeper().Renew(ctx); err != nil {
			return a.holdDown(fence{Reason: fmt.Sprintf("could not renew the primary lease at start: %v", err), Transitions: current.Transitions})
		}
		if err := a.Instance.Start(); err != nil {
			return err
		}
		return a.ensureRoles(ctx)
	case "":
		return a.holdDown(fence{Reason: "the primary lease names no instance", Transitions: l.Transitions})
	default:
		// Run asks the Lease again once the start is done (resolveFence).
		return a.holdDown(fence{Reason: "the primary lease names " + l.Holder, Transitions: l.Transitions})
	}
}

// resolveFence asks the Lease whether a fenced instance may run again: granted back to it
// (more grants than when it was fenced), it starts as it was; granted to another, it rejoins.
func (a *Agent) resolveFence(ctx context.Context) {
	f := a.fenced()
	if f == nil || !a.restartMu.TryLock() {
		return
	}
	defer a.restartMu.Unlock()
	l, err := a.keeper().Read(ctx)
	if err != nil {
		a.Log.V(1).Info("fenced; cannot read the primary lease", "error", err.Error())
		return
	}
	switch {
	case l.Holder == a.Config.PodName && l.Transitions > f.Transitions:
		err = a.unfence(ctx)
	case l.Holder != "" && l.Holder != a.Config.PodName:
		err = a.rejoin(ctx)
	default:
		return
	}
	if err != nil {
		a.Log.Error(err, "leaving the fence failed; trying again")
	}
}

// unfence starts the instance again as the primary, the Lease being granted back to it.
func (a *Agent) unfence(ctx context.Context) error {
	a.Log.Info("the primary lease is granted to this instance again; starting")
	if !a.Instance.IsStandby() {
		if _, err := a.keeper().Renew(ctx); err != nil {
			return err
		}
	}
	if err := a.Instance.Start(); err != nil {
		return err
	}
	if err := a.liftFence(); err != nil {
		return err
	}
	if !a.Instance.IsStandby() {
		return a.ensureRoles(ctx)
	}
	return nil
}

// rejoin makes a stopped former primary a standby of the new one: pg_rewind when its timeline
// diverged, a fresh clone when that fails while the primary answers. What only it had is
// reported (Status.Rejoined), never kept silently.
func (a *Agent) rejoin(ctx context.Context) error {
	if !a.Instance.IsStandby() {
		rejoined := &agentapi.Rejoin{Method: agentapi.RejoinRewind, At: time.Now().UTC().Format(time.RFC3339)}
		if control, err := a.Instance.ControlData(ctx); err == nil {
			rejoined.OldCheckpoint, rejoined.OldTimeline = control.CheckpointLSN, control.Timeline
		}
		source, password := a.rewindSource()
		rewound, err := a.Instance.Rewind(ctx, source, password)
		if errors.Is(err, postgres.ErrRewindSourceUnreachable) {
			return fmt.Errorf("the primary does not answer yet: %w", err)
		}
		if err != nil {
			a.Log.Error(err, "rewind failed; cloning the primary afresh")
			if err := removeContents(a.Instance.DataDir); err != nil {
				return err
			}
			source, password := a.cloneSource(a.credentials())
			if err := a.Instance.Clone(ctx, source, password, agentapi.SlotName(a.Config.PodName)); err != nil {
				_ = removeContents(a.Instance.DataDir)
				return fmt.Errorf("clone after a failed rewind: %w", err)
			}
			rejoined.Method, rejoined.Error = agentapi.RejoinClone, err.Error()
		} else {
			rejoined.DivergedAt = rewound.DivergedAt
		}
		if err := a.configureStandby(); err != nil {
			return err
		}
		// Now a standby: a restart from here on would not rejoin again, so the record must last.
		if err := writeJSONFile(a.rejoinRecordPath(), rejoined); err != nil {
			return fmt.Errorf("write rejoin record: %w", err)
		}
		a.stateMu.Lock()
		a.rejoined = rejoined
		a.stateMu.Unlock()
		a.Log.Info("rejoined as a standby", "method", rejoined.Method, "divergedAt", rejoined.DivergedAt,
			"oldCheckpoint", rejoined.OldCheckpoint)
	}
	if err := a.Instance.Start(); err != nil {
		return err
	}
	return a.liftFence()
}

func (a *Agent) lastRejoin() *agentapi.Rejoin {
	a.stateMu.Lock()
	defer a.stateMu.Unlock()
	return a.rejoined
}

// releaseLease gives the Lease up after a clean shutdown of the primary, so that the operator
// promotes a standby at once instead of waiting for the Lease to expire.
func (a *Agent) releaseLease() {
	if err := a.keeper().Release(context.Background()); err != nil {
		a.Log.Error(err, "releasing the primary lease failed; the operator waits for it to expire")
		return
	}
	a.Log.Info("released the primary lease")
}
