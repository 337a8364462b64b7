package controller

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

// Each kind of notable log record becomes an Event when its count grows, once per growth,
// naming the pod; the same count seen again is not news, and a deleted cluster is forgotten.
func TestAnnounceLogNotices(t *testing.T) {
	recorder := events.NewFakeRecorder(10)
	r := &PostgresClusterReconciler{Recorder: recorder}
	failedLogins := func(count int64) *scope {
		s := newScope(testCluster(2))
		s.observed.Pods = []corev1.Pod{testPod("db-0", "", true), testPod("db-1", "", true)}
		s.observed.Reports = map[string]*agentapi.Status{"db-0": primaryReport, "db-1": {Role: agentapi.RoleReplica,
			LogNotices: []agentapi.LogNotice{{Reason: agentapi.LogNoticeAuthenticationFailed, Count: count, Last: time.Now(),
				Message: `password authentication failed for user "app" (from 10.0.0.7)`}}}}
		return s
	}
	expectEvents := func(want ...string) {
		t.Helper()
		for _, w := range want {
			select {
			case got := <-recorder.Events:
				if got != w {
					t.Errorf("event %q, want %q", got, w)
				}
			default:
				t.Errorf("no event, want %q", w)
			}
		}
		select {
		case got := <-recorder.Events:
			t.Errorf("unexpected event %q", got)
		default:
		}
	}
	announce := func(s *scope) {
		t.Helper()
		if stop, err := r.announceLogNotices(context.Background(), s); stop != nil || err != nil {
			t.Fatalf("announceLogNotices = %v, %v", stop, err)
		}
	}
	const event = `Warning AuthenticationFailed db-1: password authentication failed for user "app" (from 10.0.0.7)`
	announce(failedLogins(1))
	expectEvents(event)
	announce(failedLogins(1))
	expectEvents()
	announce(failedLogins(3))
	expectEvents(event)
	r.memory().logNotices.forget(types.NamespacedName{Namespace: "ns", Name: "db"})
	announce(failedLogins(3))
	expectEvents(event)
}
