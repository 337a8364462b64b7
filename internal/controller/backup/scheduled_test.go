package backup

import (
	"context"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

func TestDueTime(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	daily, err := cron.ParseStandard("0 3 * * *")
	if err != nil {
		t.Fatal(err)
	}
	created := at("2026-12-01T10:00:00Z")
	tests := []struct {
		name              string
		last              time.Time
		immediate         bool
		now               time.Time
		wantDue, wantNext string
	}{
		{"before the first time", time.Time{}, false, at("2026-12-01T12:00:00Z"), "", "2026-12-02T03:00:00Z"},
		{"immediate takes one at once", time.Time{}, true, at("2026-12-01T10:00:01Z"), "2026-12-01T10:00:01Z", "2026-12-02T03:00:00Z"},
		{"immediate only the first time", at("2026-12-01T10:00:01Z"), true, at("2026-12-01T12:00:00Z"), "", "2026-12-02T03:00:00Z"},
		{"the first time reached", time.Time{}, false, at("2026-12-02T03:00:00Z"), "2026-12-02T03:00:00Z", "2026-12-03T03:00:00Z"},
		{"three missed days are one backup, for the latest", at("2026-12-02T03:00:00Z"), false, at("2026-12-05T09:00:00Z"),
			"2026-12-05T03:00:00Z", "2026-12-06T03:00:00Z"},
		{"taken: nothing due until tomorrow", at("2026-12-05T03:00:00Z"), false, at("2026-12-05T09:00:00Z"), "", "2026-12-06T03:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			due, next := dueTime(daily, created, tt.last, tt.immediate, tt.now)
			gotDue := ""
			if !due.IsZero() {
				gotDue = due.Format(time.RFC3339)
			}
			if gotDue != tt.wantDue || next.Format(time.RFC3339) != tt.wantNext {
				t.Errorf("due %q next %s, want %q %s", gotDue, next.Format(time.RFC3339), tt.wantDue, tt.wantNext)
			}
		})
	}
}

// A descriptor such as the e2e's "@every 30s" is due 30 s after the last backup, and next 30 s
// after the reconcile that takes it.
func TestDueTimeEvery(t *testing.T) {
	every, err := cron.ParseStandard("@every 30s")
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	now := created.Add(31 * time.Second)
	due, next := dueTime(every, created, created, true, now)
	if !due.Equal(created.Add(30*time.Second)) || !next.Equal(now.Add(30*time.Second)) {
		t.Errorf("due %s next %s, want 30 s after the last and after now", due, next)
	}
}

func scheduleFixture(t *testing.T, spec pgv1.ScheduledBackupSpec, now *time.Time, objs ...client.Object) (*ScheduledBackupReconciler, client.Client) {
	t.Helper()
	withTypes(t)
	sb := &pgv1.ScheduledBackup{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "ns", UID: "sb-uid",
		CreationTimestamp: metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))}, Spec: spec}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(append(objs, sb)...).
		WithStatusSubresource(&pgv1.ScheduledBackup{}, &pgv1.Backup{}).Build()
	return &ScheduledBackupReconciler{Client: c, Now: func() time.Time { return *now }}, c
}

func runSchedule(t *testing.T, r *ScheduledBackupReconciler, c client.Client) (*pgv1.ScheduledBackup, []pgv1.Backup, reconcile.Result) {
	t.Helper()
	result, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: "nightly"}})
	if err != nil {
		t.Fatal(err)
	}
	sb := &pgv1.ScheduledBackup{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "nightly"}, sb); err != nil {
		t.Fatal(err)
	}
	backups := &pgv1.BackupList{}
	if err := c.List(context.Background(), backups); err != nil {
		t.Fatal(err)
	}
	return sb, backups.Items, result
}

// The schedule creates one owned Backup per due time, labelled and named by the time, and
// sleeps until the next one.
func TestScheduledBackupCreatesBackupsWhenDue(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 30, 0, time.UTC)
	r, c := scheduleFixture(t, pgv1.ScheduledBackupSpec{Cluster: corev1.LocalObjectReference{Name: "db"}, Schedule: "*/5 * * * *",
		Type: pgv1.BackupIncr, Immediate: true}, &now)

	sb, backups, result := runSchedule(t, r, c)
	if len(backups) != 1 || backups[0].Name != "nightly-20261201100030" || backups[0].Spec.Type != pgv1.BackupIncr ||
		backups[0].Labels[pgv1.ScheduledBackupLabel] != "nightly" || !metav1.IsControlledBy(&backups[0], sb) {
		t.Fatalf("immediate backup: %+v", backups)
	}
	if sb.Status.LastBackup != "nightly-20261201100030" || sb.Status.NextScheduleTime.Format(time.RFC3339) != "2026-12-01T10:05:00Z" ||
		result.RequeueAfter != 4*time.Minute+30*time.Second {
		t.Fatalf("status %+v, requeue %s", sb.Status, result.RequeueAfter)
	}
	if _, backups, _ = runSchedule(t, r, c); len(backups) != 1 {
		t.Fatalf("a second reconcile before the next time created %d backups", len(backups))
	}
	now = now.Add(5 * time.Minute)
	if sb, backups, _ = runSchedule(t, r, c); len(backups) != 2 || sb.Status.LastBackup != "nightly-20261201100500" {
		t.Fatalf("at 10:05: %+v, %d backups", sb.Status, len(backups))
	}
	if c := meta.FindStatusCondition(sb.Status.Conditions, pgv1.ConditionScheduled); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("Scheduled %+v", c)
	}
}

// Only finished Backups beyond the limit go, oldest first; running ones and others' stay.
func TestScheduledBackupKeepsABoundedHistory(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 1, 0, 0, time.UTC)
	owner := &pgv1.ScheduledBackup{ObjectMeta: metav1.ObjectMeta{Name: "nightly", UID: "sb-uid"}}
	backup := func(name string, phase pgv1.BackupPhase, owned bool) client.Object {
		b := &pgv1.Backup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{pgv1.ScheduledBackupLabel: "nightly"}},
			Status: pgv1.BackupStatus{Phase: phase}}
		if owned {
			b.OwnerReferences = []metav1.OwnerReference{{APIVersion: "postgres.pgpilot.io/v1alpha1", Kind: "ScheduledBackup",
				Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}
		}
		return b
	}
	r, c := scheduleFixture(t, pgv1.ScheduledBackupSpec{Cluster: corev1.LocalObjectReference{Name: "db"}, Schedule: "@daily", BackupsHistoryLimit: 2}, &now,
		backup("nightly-20261120030000", pgv1.BackupCompleted, true), backup("nightly-20261121030000", pgv1.BackupFailed, true),
		backup("nightly-20261122030000", pgv1.BackupCompleted, true), backup("nightly-20261123030000", pgv1.BackupCompleted, true),
		backup("nightly-20261124030000", pgv1.BackupRunning, true), backup("nightly-20261119030000", pgv1.BackupCompleted, false))
	_, backups, _ := runSchedule(t, r, c)
	var names []string
	for _, b := range backups {
		names = append(names, b.Name)
	}
	want := []string{"nightly-20261119030000", "nightly-20261122030000", "nightly-20261123030000", "nightly-20261124030000"}
	if len(names) != len(want) {
		t.Fatalf("kept %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("kept %v, want %v", names, want)
		}
	}
}

func TestScheduledBackupSaysWhyItTakesNothing(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 1, 0, 0, time.UTC)
	for _, tt := range []struct {
		spec       pgv1.ScheduledBackupSpec
		wantReason string
	}{
		{pgv1.ScheduledBackupSpec{Schedule: "every night", Immediate: true}, "InvalidSchedule"},
		{pgv1.ScheduledBackupSpec{Schedule: "* * * * *", Suspend: true, Immediate: true}, "Suspended"},
	} {
		r, c := scheduleFixture(t, tt.spec, &now)
		sb, backups, result := runSchedule(t, r, c)
		cond := meta.FindStatusCondition(sb.Status.Conditions, pgv1.ConditionScheduled)
		if len(backups) != 0 || cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != tt.wantReason ||
			sb.Status.NextScheduleTime != nil || !result.IsZero() {
			t.Errorf("%+v: condition %+v, %d backups, next %v", tt.spec, cond, len(backups), sb.Status.NextScheduleTime)
		}
	}
}
