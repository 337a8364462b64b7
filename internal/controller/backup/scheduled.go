package backup

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// maxCatchUp bounds the walk over missed times after a long outage of the operator.
const maxCatchUp = 10000

// ScheduledBackupReconciler creates a ScheduledBackup's Backups when they are due and deletes
// the oldest finished ones beyond its history limit.
type ScheduledBackupReconciler struct {
	client.Client
	Recorder events.EventRecorder
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// +kubebuilder:rbac:groups=postgres.pgpilot.io,resources=scheduledbackups,verbs=get;list;watch
// +kubebuilder:rbac:groups=postgres.pgpilot.io,resources=scheduledbackups/status,verbs=get;patch
// +kubebuilder:rbac:groups=postgres.pgpilot.io,resources=backups,verbs=create;delete

// Reconcile takes the backup that is due, prunes the history and sleeps until the next one.
func (r *ScheduledBackupReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	sb := &pgv1.ScheduledBackup{}
	if err := r.Get(ctx, req.NamespacedName, sb); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	original := sb.DeepCopy()
	result, err := r.schedule(ctx, sb)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.pruneHistory(ctx, sb); err != nil {
		return reconcile.Result{}, err
	}
	if err := patchStatus(ctx, r.Client, original, sb, func(sb *pgv1.ScheduledBackup) any { return sb.Status }, r.announce); err != nil {
		return reconcile.Result{}, err
	}
	return result, nil
}

func (r *ScheduledBackupReconciler) schedule(ctx context.Context, sb *pgv1.ScheduledBackup) (reconcile.Result, error) {
	sched, err := cron.ParseStandard(sb.Spec.Schedule)
	if err != nil {
		r.setScheduled(sb, metav1.ConditionFalse, "InvalidSchedule", fmt.Sprintf("spec.schedule %q: %v", sb.Spec.Schedule, err))
		sb.Status.NextScheduleTime = nil
		return reconcile.Result{}, nil
	}
	if sb.Spec.Suspend {
		r.setScheduled(sb, metav1.ConditionFalse, "Suspended", "spec.suspend is true: no backup is taken")
		sb.Status.NextScheduleTime = nil
		return reconcile.Result{}, nil
	}
	now := r.now()
	var last time.Time
	if sb.Status.LastScheduleTime != nil {
		last = sb.Status.LastScheduleTime.Time
	}
	due, next := dueTime(sched, sb.CreationTimestamp.UTC(), last, sb.Spec.Immediate, now)
	if !due.IsZero() {
		name, err := r.createBackup(ctx, sb, due)
		if err != nil {
			return reconcile.Result{}, err
		}
		sb.Status.LastScheduleTime, sb.Status.LastBackup = ptr.To(metav1.NewTime(due)), name
	}
	sb.Status.NextScheduleTime = ptr.To(metav1.NewTime(next))
	r.setScheduled(sb, metav1.ConditionTrue, "Scheduled", fmt.Sprintf("next backup at %s", next.Format(time.RFC3339)))
	return reconcile.Result{RequeueAfter: max(next.Sub(now), time.Second)}, nil
}

// dueTime is the scheduled time a backup is due for at now (zero when none is), and the next
// scheduled time. Times missed since the last backup are caught up with one backup, for the
// latest of them.
func dueTime(sched cron.Schedule, created, last time.Time, immediate bool, now time.Time) (due, next time.Time) {
	now = now.UTC()
	if last.IsZero() && immediate {
		return now, sched.Next(now)
	}
	base := cmp.Or(last, created)
	t := sched.Next(base.UTC())
	if t.After(now) {
		return time.Time{}, t
	}
	for range maxCatchUp {
		n := sched.Next(t)
		if n.After(now) {
			break
		}
		t = n
	}
	return t, sched.Next(now)
}

// createBackup creates the Backup for the scheduled time at, owned by sb; creating it again
// (a reconcile that failed to record it) finds it there.
func (r *ScheduledBackupReconciler) createBackup(ctx context.Context, sb *pgv1.ScheduledBackup, at time.Time) (string, error) {
	backup := &pgv1.Backup{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s-%s", sb.Name, at.UTC().Format("20060102150405")),
			Namespace: sb.Namespace,
			Labels:    map[string]string{pgv1.ScheduledBackupLabel: sb.Name},
		},
		Spec: pgv1.BackupSpec{Cluster: sb.Spec.Cluster, Type: cmp.Or(sb.Spec.Type, pgv1.BackupFull)},
	}
	if err := controllerutil.SetControllerReference(sb, backup, r.Scheme()); err != nil {
		return "", err
	}
	if err := r.Create(ctx, backup); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create backup %s: %w", backup.Name, err)
	}
	r.event(sb, corev1.EventTypeNormal, "BackupCreated", "Created Backup %s for %s", backup.Name, at.Format(time.RFC3339))
	return backup.Name, nil
}

// pruneHistory deletes the oldest finished Backups of sb beyond its history limit; running
// and pending ones are never deleted.
func (r *ScheduledBackupReconciler) pruneHistory(ctx context.Context, sb *pgv1.ScheduledBackup) error {
	backups := &pgv1.BackupList{}
	if err := r.List(ctx, backups, client.InNamespace(sb.Namespace), client.MatchingLabels{pgv1.ScheduledBackupLabel: sb.Name}); err != nil {
		return fmt.Errorf("list backups: %w", err)
	}
	var finished []pgv1.Backup
	for _, b := range backups.Items {
		if (b.Status.Phase == pgv1.BackupCompleted || b.Status.Phase == pgv1.BackupFailed) && metav1.IsControlledBy(&b, sb) {
			finished = append(finished, b)
		}
	}
	slices.SortFunc(finished, func(a, b pgv1.Backup) int { return cmp.Compare(b.Name, a.Name) }) // newest first: names carry the time
	limit := int(cmp.Or(sb.Spec.BackupsHistoryLimit, 5))
	for i := limit; i < len(finished); i++ {
		if err := r.Delete(ctx, &finished[i], client.Preconditions{UID: &finished[i].UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete backup %s: %w", finished[i].Name, err)
		}
	}
	return nil
}

func (r *ScheduledBackupReconciler) setScheduled(sb *pgv1.ScheduledBackup, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&sb.Status.Conditions, metav1.Condition{Type: pgv1.ConditionScheduled, Status: status,
		Reason: reason, Message: message, ObservedGeneration: sb.Generation})
}

// announce records an Event when the Scheduled condition changes reason.
func (r *ScheduledBackupReconciler) announce(before, after *pgv1.ScheduledBackup) {
	c := meta.FindStatusCondition(after.Status.Conditions, pgv1.ConditionScheduled)
	old := meta.FindStatusCondition(before.Status.Conditions, pgv1.ConditionScheduled)
	if c == nil || (old != nil && old.Reason == c.Reason) {
		return
	}
	eventType := corev1.EventTypeNormal
	if c.Reason == "InvalidSchedule" {
		eventType = corev1.EventTypeWarning
	}
	r.event(after, eventType, c.Reason, "%s", c.Message)
}

func (r *ScheduledBackupReconciler) event(sb *pgv1.ScheduledBackup, eventType, reason, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(sb, nil, eventType, reason, "Schedule", note, args...)
	}
}

func (r *ScheduledBackupReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now().UTC()
	}
	return time.Now().UTC()
}

// SetupWithManager watches ScheduledBackups (spec changes; the reconciler sleeps until the next
// time itself) and the Backups they own, whose completion may make the history prunable.
func (r *ScheduledBackupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&pgv1.ScheduledBackup{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&pgv1.Backup{}).
		Named("scheduledbackup").
		Complete(r)
}
