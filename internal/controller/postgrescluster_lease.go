package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update

// ensureInstanceAccess gives the instance agents their ServiceAccount, and a Role that lets
// them read and renew the cluster's primary Lease and nothing else.
func (r *PostgresClusterReconciler) ensureInstanceAccess(ctx context.Context, s *scope) (*stop, error) {
	if err := ensureOwned(ctx, r, s, pgbuilder.BuildInstanceServiceAccount(s.cluster), &corev1.ServiceAccount{}); err != nil {
		return nil, err
	}
	if err := ensureOwned(ctx, r, s, pgbuilder.BuildInstanceRole(s.cluster), &rbacv1.Role{}); err != nil {
		return nil, err
	}
	return nil, ensureOwned(ctx, r, s, pgbuilder.BuildInstanceRoleBinding(s.cluster), &rbacv1.RoleBinding{})
}

// ensurePrimaryLease creates the primary Lease once, naming the current primary (the initial
// one for a new cluster). Its renewals wake no reconcile (postgrescluster_leasewatch.go), and
// a failover reads it from the API server, not the cache. After it exists, only failover and
// switchover touch it, by a compare-and-swap grant. The cache (which the lease watch fills)
// tells whether it exists: a restarted operator finds every Lease there and sends nothing.
func (r *PostgresClusterReconciler) ensurePrimaryLease(ctx context.Context, s *scope) (*stop, error) {
	if r.leases().known(s.cluster.UID) {
		return nil, nil
	}
	if s.failure != nil && s.failure.reason == reasonNamespaceTerminating {
		return nil, nil // the children's lane found nothing can be created here
	}
	holder := s.cluster.Status.CurrentPrimary
	if holder == "" {
		holder = pgbuilder.InstancePodName(s.cluster, 0)
	}
	lease := pgbuilder.BuildPrimaryLease(s.cluster, holder, metav1.NowMicro())
	existing := &coordinationv1.Lease{}
	switch err := r.Get(ctx, client.ObjectKeyFromObject(lease), existing); {
	case err == nil && !metav1.IsControlledBy(existing, s.cluster):
		// A deleted cluster's of the same name, which the garbage collector has yet to remove.
		return waitFor("PreviousLeaseRemoving", fmt.Sprintf(
			"Lease %s belongs to an earlier cluster of this name; waiting for it to be removed", lease.Name)), nil
	case err == nil:
		r.leases().remember(s.cluster.UID)
		return nil, nil
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("get lease %s: %w", lease.Name, err)
	}
	switch err := r.Create(ctx, lease, client.FieldOwner(pgbuilder.FieldOwner)); {
	case err == nil:
		recordWrite("Lease", "created")
		s.created = append(s.created, "Lease "+lease.Name)
	case apierrors.IsAlreadyExists(err):
		// The cache had not seen it yet; the next reconcile checks whose it is.
		return waitFor("LeaseCreating", fmt.Sprintf("Lease %s exists but is not in the cache yet", lease.Name)), nil
	default:
		return nil, fmt.Errorf("create lease %s: %w", lease.Name, err)
	}
	r.leases().remember(s.cluster.UID)
	return nil, nil
}

// readPrimaryLease reads the Lease from the API server (never cached) and notes when it was
// last seen to change.
func (r *PostgresClusterReconciler) readPrimaryLease(ctx context.Context, s *scope) (*coordinationv1.Lease, error) {
	lease := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: s.cluster.Namespace, Name: pgbuilder.PrimaryLeaseName(s.cluster)}
	if err := r.APIReader.Get(ctx, key, lease); err != nil {
		return nil, fmt.Errorf("get lease %s: %w", key.Name, err)
	}
	r.leases().observe(s.cluster.UID, lease.ResourceVersion, time.Now())
	return lease, nil
}

// grantPrimaryLease gives the Lease to holder, counting one more grant, on condition that it
// is still the version read: an old primary that renewed it in between wins, and the failover
// looks again.
func (r *PostgresClusterReconciler) grantPrimaryLease(ctx context.Context, lease *coordinationv1.Lease, holder string) error {
	lease = lease.DeepCopy()
	now := metav1.NowMicro()
	lease.Spec.HolderIdentity = ptr.To(holder)
	lease.Spec.AcquireTime, lease.Spec.RenewTime = &now, &now
	lease.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
	if err := r.Update(ctx, lease, client.FieldOwner(pgbuilder.FieldOwner)); err != nil {
		return fmt.Errorf("grant lease %s to %s: %w", lease.Name, holder, err)
	}
	recordWrite("Lease", "granted")
	return nil
}

func leaseHolder(lease *coordinationv1.Lease) string { return ptr.Deref(lease.Spec.HolderIdentity, "") }

// leaseTracker is what this operator process saw of each cluster's Lease, by its own clock:
// a Lease is lapsed only once this process has watched it not change for LeaseExpiry, so a
// restarted operator waits a whole expiry again, and clock skew between nodes plays no part.
type leaseTracker struct {
	mu      sync.Mutex
	created map[types.UID]bool
	seen    map[types.UID]leaseSeen
	// peersGone is when no standby of an older release (without the detach order) was first
	// seen streaming during a failover.
	peersGone map[types.UID]time.Time
	// failing is when the primary was first seen failed, for spec.failoverDelay.
	failing map[types.UID]time.Time
	// silent is when the primary's agent first did not answer while its pod was still ready.
	silent map[types.UID]time.Time
	// heard is the primary whose agent this process last heard answer: only an agent heard
	// before can fall silent (an instance of an old release may have none).
	heard map[types.UID]string
}

type leaseSeen struct {
	version string
	at      time.Time
	// From the watch, for the watchdog: whose Lease, who holds it, and whether the cluster was
	// woken for this version already.
	cluster types.NamespacedName
	holder  string
	alarmed bool
}

func (r *PostgresClusterReconciler) leases() *leaseTracker {
	r.leaseOnce.Do(func() {
		r.leaseTracker = &leaseTracker{created: map[types.UID]bool{}, seen: map[types.UID]leaseSeen{},
			peersGone: map[types.UID]time.Time{}, failing: map[types.UID]time.Time{}, silent: map[types.UID]time.Time{},
			heard: map[types.UID]string{}}
	})
	return r.leaseTracker
}

func (t *leaseTracker) known(uid types.UID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.created[uid]
}

func (t *leaseTracker) remember(uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.created[uid] = true
}

func (t *leaseTracker) observe(uid types.UID, version string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.observeLocked(uid, version, now)
}

func (t *leaseTracker) observeLocked(uid types.UID, version string, now time.Time) leaseSeen {
	seen := t.seen[uid]
	if seen.version != version {
		seen.version, seen.at, seen.alarmed = version, now, false
		t.seen[uid] = seen
	}
	return seen
}

// watched records a version of cluster's Lease delivered by the watch.
func (t *leaseTracker) watched(uid types.UID, cluster types.NamespacedName, version, holder string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen := t.observeLocked(uid, version, now)
	seen.cluster, seen.holder = cluster, holder
	t.seen[uid] = seen
}

// stale returns, once per version, the clusters whose held Lease has not changed for
// leaseAlarmAfter.
func (t *leaseTracker) stale(now time.Time) []types.NamespacedName {
	t.mu.Lock()
	defer t.mu.Unlock()
	var clusters []types.NamespacedName
	for uid, seen := range t.seen {
		if seen.holder == "" || seen.cluster.Name == "" || seen.alarmed || now.Sub(seen.at) < leaseAlarmAfter {
			continue
		}
		seen.alarmed = true
		t.seen[uid] = seen
		clusters = append(clusters, seen.cluster)
	}
	return clusters
}

// unchangedFor is how long this process has seen the Lease keep its current version, and
// whether it has seen it at all.
func (t *leaseTracker) unchangedFor(uid types.UID, now time.Time) (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	seen, ok := t.seen[uid]
	return now.Sub(seen.at), ok
}

// since records the first time of a condition (set) or forgets it; it returns how long the
// condition has held.
func (t *leaseTracker) since(m map[types.UID]time.Time, uid types.UID, holds bool, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !holds {
		delete(m, uid)
		return 0
	}
	first, ok := m[uid]
	if !ok {
		m[uid], first = now, now
	}
	return now.Sub(first)
}

// heardFrom notes that primary's agent answered (answered) and reports whether this process
// has heard it answer since it became the primary it knows.
func (t *leaseTracker) heardFrom(uid types.UID, primary string, answered bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if answered {
		t.heard[uid] = primary
	}
	return t.heard[uid] == primary
}

// suspected: the primary went silent, is being failed over from, or its Lease went unrenewed
// for leaseAlarmAfter.
func (t *leaseTracker) suspected(uid types.UID, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, silent := t.silent[uid]
	_, failing := t.failing[uid]
	seen, watched := t.seen[uid]
	return silent || failing || (watched && now.Sub(seen.at) >= leaseAlarmAfter)
}

func (t *leaseTracker) forget(uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.created, uid)
	delete(t.seen, uid)
	delete(t.peersGone, uid)
	delete(t.failing, uid)
	delete(t.silent, uid)
	delete(t.heard, uid)
}

// leaseLapsed: the holder cannot be reached, and by now it has fenced itself: this process saw
// its Lease unrenewed for LeaseExpiry, and every other instance has not streamed from it for
// PeersGoneWait (a primary with a standby still replying keeps running,
// docs/high-availability.md). peersGone is that time, or why it is unknown.
func (t *leaseTracker) leaseLapsed(uid types.UID, peersGone time.Duration, unknown string, now time.Time) (bool, string) {
	unchanged, _ := t.unchangedFor(uid, now)
	switch {
	case unchanged < agentapi.LeaseExpiry:
		return false, fmt.Sprintf("its lease was renewed %s ago; it lapses after %s", unchanged.Round(time.Second), agentapi.LeaseExpiry)
	case unknown != "":
		return false, unknown
	case peersGone < agentapi.PeersGoneWait:
		return false, fmt.Sprintf("no standby has streamed from it for %s; waiting %s", peersGone.Round(100*time.Millisecond), agentapi.PeersGoneWait)
	}
	return true, ""
}
