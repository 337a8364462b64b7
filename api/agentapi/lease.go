package agentapi

import "time"

// The primary Lease is the fencing token of a cluster: the instance it names (holderIdentity)
// is the only one that may run PostgreSQL as a primary. The operator creates it naming the
// initial primary and grants it (a compare-and-swap update that also counts leaseTransitions)
// when it fails or switches over; the primary's agent renews it, and gives it up (holder "")
// when its pod is shut down. docs/high-availability.md gives the timing argument.
const (
	// LeaseRenewInterval is how often the primary's agent renews the Lease: one write per
	// interval per cluster, the cost of the fencing.
	LeaseRenewInterval = 5 * time.Second
	// LeaseRetryInterval: a renewal that failed is tried again this soon.
	LeaseRetryInterval = time.Second
	// LeaseFenceAfter: a primary whose agent has not renewed the Lease for this long, counted
	// from the start of its last successful renewal, stops PostgreSQL at once unless a standby
	// still streams from it (PeerWindow). A failed renewal is tried again every second, so
	// this is several attempts, not one.
	LeaseFenceAfter = 8 * time.Second
	// PeerWindow: a standby whose last reply reached the primary this recently is a peer that
	// can see it; an API-server outage alone does not stop a primary that has one. Standbys
	// reply every second (wal_receiver_status_interval), so two replies may go missing.
	PeerWindow = 3 * time.Second
	// LeaseGuardInterval: how often the primary's agent applies the two rules above, apart from
	// everything else it does; with its look at the standbys' replies (bounded by the same
	// interval) a check comes at most 1 s after the one before.
	LeaseGuardInterval = 500 * time.Millisecond
	// LeaseExpiry: the operator takes a holder that it cannot reach as fenced once it has seen no
	// renewal for this long, by its own clock. It exceeds LeaseFenceAfter by a check (1 s), an
	// immediate shutdown (1 s) and a margin of 2 s.
	LeaseExpiry = 12 * time.Second
	// PeersGoneWait: and once every other instance has been detached from it for this long
	// (PathDetach: its WAL receiver stopped and held off). It exceeds PeerWindow by the look
	// that notes a reply (1 s), a check (1 s), an immediate shutdown (1 s) and a margin of 2 s.
	PeersGoneWait = 8 * time.Second
	// DetachHold: how long a standby stays detached after the operator's last order to, unless
	// told to attach sooner. Far longer than a reconcile's step from an order to a grant, so a
	// standby never streams again from the old primary between the two.
	DetachHold = 20 * time.Second
	// UnresponsiveAfter: a primary whose PostgreSQL has not answered its agent's local queries
	// for this long is reported unresponsive (frozen), for the operator to fence and fail over
	// after spec.failoverDelay. Longer than a readiness probe's failure (4 s), so that one slow
	// query is not a freeze.
	UnresponsiveAfter = 5 * time.Second
	// LeaseRequestTimeout bounds one renewal.
	LeaseRequestTimeout = 3 * time.Second
)

// LeaseName is the primary Lease of the cluster named cluster.
func LeaseName(cluster string) string { return cluster + "-primary" }
