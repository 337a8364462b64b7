package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

// LeaseKeeper is what an agent knows of its cluster's primary Lease, and how it renews it for
// Holder: a compare-and-swap on the version it last read or wrote, so one renewal is one
// write; it reads again only after a conflict. The agent's fencing decides when to call it;
// `make bench` drives it too, to count what the primary's heartbeat costs the API server.
type LeaseKeeper struct {
	Store  LeaseStore
	Holder string

	mu sync.Mutex
	// lease is the Lease last read or written; renewedAt the start of the last successful
	// renewal; attempted the last renewal tried.
	lease     Lease
	renewedAt time.Time
	attempted time.Time
	// failed: the last renewal failed; the next is due LeaseRetryInterval after it.
	failed bool
}

// Current is the Lease as last read or written.
func (k *LeaseKeeper) Current() Lease {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lease
}

func (k *LeaseKeeper) remember(l Lease, renewedAt time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lease = l
	if !renewedAt.IsZero() {
		k.renewedAt = renewedAt
	}
}

// Read reads the Lease and remembers it.
func (k *LeaseKeeper) Read(ctx context.Context) (Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, agentapi.LeaseRequestTimeout)
	defer cancel()
	l, err := k.Store.Get(ctx)
	if err == nil {
		k.remember(l, time.Time{})
	}
	return l, err
}

// Renew renews the Lease for Holder. On a conflict it reads the Lease again: still Holder's,
// it renews that version; another's, it answers it with ErrLeaseConflict.
func (k *LeaseKeeper) Renew(ctx context.Context) (Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, agentapi.LeaseRequestTimeout)
	defer cancel()
	started := time.Now()
	l, err := k.Store.Renew(ctx, k.Current(), k.Holder)
	if errors.Is(err, ErrLeaseConflict) {
		current, getErr := k.Store.Get(ctx)
		if getErr != nil {
			return Lease{}, fmt.Errorf("the lease changed and reading it again failed: %w", getErr)
		}
		k.remember(current, time.Time{})
		if current.Holder != k.Holder {
			return current, err
		}
		started = time.Now()
		l, err = k.Store.Renew(ctx, current, k.Holder)
	}
	if err != nil {
		return Lease{}, err
	}
	k.remember(l, started)
	return l, nil
}

// RenewIfDue renews when LeaseRenewInterval has passed since the last attempt, or
// LeaseRetryInterval since a failed one; renewed says whether it tried. Only successful
// renewals write, so retries cost the API server no writes while it cannot take them.
func (k *LeaseKeeper) RenewIfDue(ctx context.Context, now time.Time) (l Lease, renewed bool, err error) {
	k.mu.Lock()
	wait := agentapi.LeaseRenewInterval
	if k.failed {
		wait = agentapi.LeaseRetryInterval
	}
	due := now.Sub(k.attempted) >= wait
	if due {
		k.attempted = now
	}
	k.mu.Unlock()
	if !due {
		return k.Current(), false, nil
	}
	l, err = k.Renew(ctx)
	k.mu.Lock()
	k.failed = err != nil
	k.mu.Unlock()
	return l, true, err
}

// SinceRenewal is how long ago the last successful renewal started.
func (k *LeaseKeeper) SinceRenewal(now time.Time) time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	return now.Sub(k.renewedAt)
}

// Release gives the Lease up (holder ""), from the version last known.
func (k *LeaseKeeper) Release(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, agentapi.LeaseRequestTimeout)
	defer cancel()
	l, err := k.Store.Renew(ctx, k.Current(), "")
	if err == nil {
		k.remember(l, time.Time{})
	}
	return err
}
