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
// unrenewed for LeaseExpiry and no standby stream for PeersGoneWait after that.
func TestLeaseLapse(t *testing.T) {
	tracker := (&PostgresClusterReconciler{}).leases()
	uid, start := types.UID("c"), time.Now()
	tracker.observe(uid, "1", start)
	if lapsed, _ := tracker.leaseLapsed(uid, false, start.Add(agentapi.LeaseExpiry-time.Second)); lapsed {
		t.Fatal("lapsed before LeaseExpiry")
	}
	tracker.observe(uid, "2", start.Add(10*time.Second)) // renewed: the clock starts again
	at := start.Add(10*time.Second + agentapi.LeaseExpiry)
	if lapsed, why := tracker.leaseLapsed(uid, true, at); lapsed {
		t.Fatalf("lapsed while a standby streams: %s", why)
	}
	if lapsed, _ := tracker.leaseLapsed(uid, false, at); lapsed {
		t.Fatal("lapsed the moment the standbys stopped streaming")
	}
	if lapsed, why := tracker.leaseLapsed(uid, false, at.Add(agentapi.PeersGoneWait)); !lapsed {
		t.Fatalf("not lapsed after PeersGoneWait: %s", why)
	}
	// The timing argument: the agent fences itself before the operator may promote.
	if agentapi.LeaseExpiry <= agentapi.LeaseFenceAfter+agentapi.LeaseRequestTimeout+2*time.Second ||
		agentapi.PeersGoneWait <= agentapi.PeerWindow+2*time.Second {
		t.Error("the operator's waits do not cover the agent's fencing bound")
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
	if got := tracker.stale(leaseAlarmAfter, start.Add(leaseAlarmAfter-time.Second)); len(got) != 0 {
		t.Fatalf("alarm before leaseAlarmAfter: %v", got)
	}
	if got := tracker.stale(leaseAlarmAfter, start.Add(leaseAlarmAfter)); len(got) != 1 || got[0] != held {
		t.Fatalf("alarms %v, want [%v]", got, held)
	}
	if got := tracker.stale(leaseAlarmAfter, start.Add(2*leaseAlarmAfter)); len(got) != 0 {
		t.Fatalf("a second alarm for the same version: %v", got)
	}
	tracker.watched("a", held, "2", "db-0", start.Add(2*leaseAlarmAfter)) // renewed: armed again
	if got := tracker.stale(leaseAlarmAfter, start.Add(3*leaseAlarmAfter)); len(got) != 1 {
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
