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
	// LeaseFenceAfter: a primary whose agent has not renewed the Lease for this long, counted
	// from the start of its last successful renewal, stops PostgreSQL at once unless a standby
	// still streams from it (PeerWindow).
	LeaseFenceAfter = 12 * time.Second
	// PeerWindow: a standby whose last reply reached the primary this recently is a peer that
	// can see it; an API-server outage alone does not stop a primary that has one.
	PeerWindow = 4 * time.Second
	// LeaseExpiry: the operator takes a holder that it cannot reach as fenced once it has seen no
	// renewal for this long, by its own clock. It exceeds LeaseFenceAfter by more than a
	// check (1 s), an immediate shutdown (1 s) and one renewal's timeout (3 s).
	LeaseExpiry = 20 * time.Second
	// PeersGoneWait: and once no standby has reported streaming for this long, which exceeds
	// PeerWindow by the same margin.
	PeersGoneWait = 10 * time.Second
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
