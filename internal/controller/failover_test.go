package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

func replica(received, replayed string, streaming bool) *agentapi.Status {
	return &agentapi.Status{Role: agentapi.RoleReplica, ReceiveLSN: received, ReplayLSN: replayed, Streaming: streaming}
}

// An unreachable holder counts as fenced only once this process watched its Lease stay
// unrenewed for LeaseExpiry and every other instance was detached from it for PeersGoneWait.
func TestLeaseLapse(t *testing.T) {
	tracker := (&PostgresClusterReconciler{}).leases()
	uid, start := types.UID("c"), time.Now()
	tracker.observe(uid, "1", start)
	if lapsed, _ := tracker.leaseLapsed(uid, time.Hour, "", start.Add(agentapi.LeaseExpiry-time.Second)); lapsed {
		t.Fatal("lapsed before LeaseExpiry")
	}
	tracker.observe(uid, "2", start.Add(10*time.Second)) // renewed: the clock starts again
	at := start.Add(10*time.Second + agentapi.LeaseExpiry)
	if lapsed, why := tracker.leaseLapsed(uid, time.Hour, "db-2 may still stream from it", at); lapsed || why != "db-2 may still stream from it" {
		t.Fatalf("lapsed while a standby may stream: %v %s", lapsed, why)
	}
	if lapsed, _ := tracker.leaseLapsed(uid, agentapi.PeersGoneWait-time.Millisecond, "", at); lapsed {
		t.Fatal("lapsed before every standby was detached for PeersGoneWait")
	}
	if lapsed, why := tracker.leaseLapsed(uid, agentapi.PeersGoneWait, "", at); !lapsed {
		t.Fatalf("not lapsed after PeersGoneWait: %s", why)
	}
}

// The timing argument (docs/high-availability.md): the old primary stops before the operator
// may grant its Lease, by both of its rules, with a margin; and a detached standby's hold
// outlasts the operator's step from its answer to the grant (one agent request at most).
func TestTimingArgument(t *testing.T) {
	const check, immediateShutdown, margin = time.Second, time.Second, 2 * time.Second
	if 2*agentapi.LeaseGuardInterval > check {
		t.Errorf("the lease guard checks every %s (with its look at the replies), over the %s the argument allows", 2*agentapi.LeaseGuardInterval, check)
	}
	if fence := agentapi.LeaseFenceAfter + check + immediateShutdown; agentapi.LeaseExpiry < fence+margin {
		t.Errorf("LeaseExpiry %s: the isolated primary may run until %s after its last renewal", agentapi.LeaseExpiry, fence)
	}
	noted := check // a reply's arrival is noted within one look
	if fence := agentapi.PeerWindow + noted + check + immediateShutdown; agentapi.PeersGoneWait < fence+margin {
		t.Errorf("PeersGoneWait %s: the isolated primary may run until %s after its last standby detached", agentapi.PeersGoneWait, fence)
	}
	if agentapi.DetachHold < 2*agentapi.DefaultRequestTimeout+agentapi.PeersGoneWait {
		t.Errorf("DetachHold %s is too short to outlast a reconcile's step to the grant", agentapi.DetachHold)
	}
	if agentapi.LeaseRenewInterval+agentapi.LeaseRequestTimeout > agentapi.LeaseFenceAfter {
		t.Error("a primary would fence itself before a second renewal could be tried")
	}
}

// The watchdog wakes a cluster once per Lease version that stays unrenewed, and never one
// whose Lease nobody holds.
func TestStaleLeaseAlarm(t *testing.T) {
	tracker := (&PostgresClusterReconciler{}).leases()
	held, released := types.NamespacedName{Namespace: "ns", Name: "held"}, types.NamespacedName{Namespace: "ns", Name: "released"}
	start := time.Now()
	tracker.watched("a", held, "1", "db-0", start)
	tracker.watched("b", released, "7", "", start)
	if got := tracker.stale(start.Add(leaseAlarmAfter - time.Second)); len(got) != 0 {
		t.Fatalf("alarm before leaseAlarmAfter: %v", got)
	}
	if got := tracker.stale(start.Add(leaseAlarmAfter)); len(got) != 1 || got[0] != held {
		t.Fatalf("alarms %v, want [%v]", got, held)
	}
	if got := tracker.stale(start.Add(2 * leaseAlarmAfter)); len(got) != 0 {
		t.Fatalf("a second alarm for the same version: %v", got)
	}
	tracker.watched("a", held, "2", "db-0", start.Add(2*leaseAlarmAfter)) // renewed: armed again
	if got := tracker.stale(start.Add(3 * leaseAlarmAfter)); len(got) != 1 {
		t.Fatalf("no alarm after the renewal went stale: %v", got)
	}
	if unchanged, seen := tracker.unchangedFor("a", start.Add(3*leaseAlarmAfter)); !seen || unchanged != leaseAlarmAfter {
		t.Fatalf("unchangedFor %s %v", unchanged, seen)
	}
}

// Only an agent heard before can fall silent: a primary of an old release without an agent,
// or one this process never heard, is not failed over for its silence.
func TestHeardFrom(t *testing.T) {
	tracker := (&PostgresClusterReconciler{}).leases()
	if tracker.heardFrom("c", "db-0", false) {
		t.Fatal("heard from an agent that never answered")
	}
	if !tracker.heardFrom("c", "db-0", true) || !tracker.heardFrom("c", "db-0", false) {
		t.Fatal("an agent that answered once was not heard")
	}
	if tracker.heardFrom("c", "db-1", false) {
		t.Fatal("heard from a new primary that never answered")
	}
}
