package backup

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlbuilder "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/controller/agentclient"
)

// How often a Backup is looked at while it waits to start and while it runs.
const (
	backupWaitInterval = 10 * time.Second
	backupPollInterval = 5 * time.Second
)

// BackupAgents is what the Backup reconciler asks of the primary's agent.
type BackupAgents interface {
	StartBackup(ctx context.Context, e agentapi.Endpoint, req agentapi.BackupRequest) (*agentapi.BackupResult, error)
	BackupResult(ctx context.Context, e agentapi.Endpoint, name string) (*agentapi.BackupResult, error)
}

// BackupReconciler takes each Backup once, on its cluster's primary, and records what
// pgBackRest reported.
type BackupReconciler struct {
	client.Client
	Recorder events.EventRecorder
	// Agents nil means agentapi.HTTPClient; AgentAddress nil means AgentAddress.
	Agents       BackupAgents
	AgentAddress func(*corev1.Pod) string

	// AgentTLS holds the operator's TLS client configuration per cluster, shared with the
	// cluster reconciler, which forgets deleted clusters (controller.Memory); nil means its own.
	AgentTLS *agentclient.TLSConfigs
	tlsOnce  sync.Once
}

// +kubebuilder:rbac:groups=postgres.pgpilot.io,resources=backups,verbs=get;list;watch
// +kubebuilder:rbac:groups=postgres.pgpilot.io,resources=backups/status,verbs=get;patch

// Reconcile moves a Backup from Pending to Running to Completed or Failed.
func (r *BackupReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	backup := &pgv1.Backup{}
	if err := r.Get(ctx, req.NamespacedName, backup); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if backup.Status.Phase == pgv1.BackupCompleted || backup.Status.Phase == pgv1.BackupFailed {
		return reconcile.Result{}, nil
	}
	original := backup.DeepCopy()
	result, err := r.advance(ctx, backup)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := patchStatus(ctx, r.Client, original, backup, func(b *pgv1.Backup) any { return b.Status }, r.announce); err != nil {
		return reconcile.Result{}, err
	}
	return result, nil
}

// advance takes one step and says when to look again.
func (r *BackupReconciler) advance(ctx context.Context, b *pgv1.Backup) (reconcile.Result, error) {
	cluster := &pgv1.PostgresCluster{}
	err := r.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Spec.Cluster.Name}, cluster)
	if apierrors.IsNotFound(err) {
		return r.pending(b, fmt.Sprintf("PostgresCluster %q does not exist", b.Spec.Cluster.Name)), nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if cluster.Spec.Backup == nil {
		r.fail(b, fmt.Sprintf("PostgresCluster %q has no spec.backup: it has no repository to back up into", cluster.Name))
		return reconcile.Result{}, nil
	}
	if b.Status.Phase == pgv1.BackupRunning {
		return r.follow(ctx, b, cluster)
	}
	if c := meta.FindStatusCondition(cluster.Status.Conditions, pgv1.ConditionContinuousArchiving); c == nil || c.Status != metav1.ConditionTrue {
		// pgBackRest waits for the backup's WAL to be archived; without archiving it would fail.
		return r.pending(b, fmt.Sprintf("waiting for PostgresCluster %q to archive WAL (ContinuousArchiving is not True)", cluster.Name)), nil
	}
	endpoint, err := r.primaryEndpoint(ctx, cluster)
	if err != nil || endpoint == nil {
		return r.pending(b, fmt.Sprintf("waiting for the primary of PostgresCluster %q to answer", cluster.Name)), err
	}
	answer, err := r.agents().StartBackup(ctx, *endpoint, agentapi.BackupRequest{Name: agentBackupName(b), Type: string(backupType(b))})
	if errors.Is(err, agentapi.ErrBackupBusy) {
		return r.pending(b, "waiting for another backup of the cluster to finish"), nil
	}
	if err != nil {
		return r.pending(b, "the primary's agent did not start the backup: "+err.Error()), nil
	}
	b.Status.Phase, b.Status.Instance, b.Status.Error = pgv1.BackupRunning, cluster.Status.CurrentPrimary, ""
	b.Status.StartedAt = parseAgentTime(answer.StartedAt)
	return reconcile.Result{RequeueAfter: backupPollInterval}, nil
}

// follow asks the instance running the backup how it went.
func (r *BackupReconciler) follow(ctx context.Context, b *pgv1.Backup, cluster *pgv1.PostgresCluster) (reconcile.Result, error) {
	pod := &corev1.Pod{}
	err := r.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: b.Status.Instance}, pod)
	if apierrors.IsNotFound(err) {
		r.fail(b, fmt.Sprintf("instance %s went away during the backup", b.Status.Instance))
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	endpoint, err := r.endpoint(ctx, cluster, pod)
	if err != nil || endpoint == nil {
		return reconcile.Result{RequeueAfter: backupPollInterval}, err
	}
	answer, err := r.agents().BackupResult(ctx, *endpoint, agentBackupName(b))
	switch {
	case errors.Is(err, agentapi.ErrUnknownBackup):
		r.fail(b, fmt.Sprintf("the agent of %s restarted during the backup; take another", b.Status.Instance))
		return reconcile.Result{}, nil
	case err != nil:
		return reconcile.Result{RequeueAfter: backupPollInterval}, nil // unreachable for now: ask again
	}
	switch answer.Phase {
	case agentapi.BackupCompleted:
		fillBackupStatus(&b.Status, answer)
	case agentapi.BackupFailed:
		b.Status.StoppedAt = parseAgentTime(answer.StoppedAt)
		r.fail(b, answer.Error)
	default:
		return reconcile.Result{RequeueAfter: backupPollInterval}, nil
	}
	return reconcile.Result{}, nil
}

func fillBackupStatus(st *pgv1.BackupStatus, answer *agentapi.BackupResult) {
	st.Phase, st.Error = pgv1.BackupCompleted, ""
	st.StoppedAt = parseAgentTime(answer.StoppedAt)
	if rec := answer.Backup; rec != nil {
		st.Label, st.SizeBytes, st.RepositorySizeBytes = rec.Label, rec.Size, rec.RepositorySize
		st.StartLSN, st.StopLSN, st.StartWAL, st.StopWAL = rec.StartLSN, rec.StopLSN, rec.StartWAL, rec.StopWAL
		start, stop := metav1.NewTime(time.Unix(rec.Start, 0).UTC()), metav1.NewTime(time.Unix(rec.Stop, 0).UTC())
		st.StartedAt, st.StoppedAt = &start, &stop
	}
}

func (r *BackupReconciler) pending(b *pgv1.Backup, why string) reconcile.Result {
	b.Status.Phase, b.Status.Error = pgv1.BackupPending, why
	return reconcile.Result{RequeueAfter: backupWaitInterval}
}

func (r *BackupReconciler) fail(b *pgv1.Backup, why string) {
	b.Status.Phase, b.Status.Error = pgv1.BackupFailed, why
	if b.Status.StoppedAt == nil {
		now := metav1.Now()
		b.Status.StoppedAt = &now
	}
}

// announce records an Event when the Backup starts, completes or fails.
func (r *BackupReconciler) announce(before, after *pgv1.Backup) {
	if r.Recorder == nil || before.Status.Phase == after.Status.Phase {
		return
	}
	switch after.Status.Phase {
	case pgv1.BackupRunning:
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, "BackupStarted", "Backup", "%s backup started on %s", backupType(after), after.Status.Instance)
	case pgv1.BackupCompleted:
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, "BackupCompleted", "Backup", "backup %s completed: %d bytes, WAL %s to %s",
			after.Status.Label, after.Status.SizeBytes, after.Status.StartWAL, after.Status.StopWAL)
	case pgv1.BackupFailed:
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, "BackupFailed", "Backup", "%s", after.Status.Error)
	}
}

// primaryEndpoint is the agent of the cluster's current primary; nil while there is none.
func (r *BackupReconciler) primaryEndpoint(ctx context.Context, cluster *pgv1.PostgresCluster) (*agentapi.Endpoint, error) {
	if cluster.Status.CurrentPrimary == "" || cluster.Status.TargetPrimary != "" {
		return nil, nil // none, or changing
	}
	pod := &corev1.Pod{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: cluster.Status.CurrentPrimary}, pod); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return r.endpoint(ctx, cluster, pod)
}

func (r *BackupReconciler) endpoint(ctx context.Context, cluster *pgv1.PostgresCluster, pod *corev1.Pod) (*agentapi.Endpoint, error) {
	if !pgbuilder.IsInstancePod(cluster, pod) {
		return nil, nil
	}
	secret := &corev1.Secret{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: pgbuilder.AgentSecretName(cluster)}, secret); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	address := agentclient.Address(pod)
	if r.AgentAddress != nil {
		address = r.AgentAddress(pod)
	}
	if address == "" {
		return nil, nil
	}
	e := &agentapi.Endpoint{Address: address, Token: string(secret.Data[corev1.BasicAuthPasswordKey])}
	if agentclient.ServesTLS(pod) {
		config, err := r.agentTLS().Load(ctx, r.Client, cluster)
		if err != nil || config == nil {
			return nil, err
		}
		e.TLS = config
	}
	return e, nil
}

func (r *BackupReconciler) agentTLS() *agentclient.TLSConfigs {
	r.tlsOnce.Do(func() {
		if r.AgentTLS == nil {
			r.AgentTLS = &agentclient.TLSConfigs{}
		}
	})
	return r.AgentTLS
}

func (r *BackupReconciler) agents() BackupAgents {
	if r.Agents != nil {
		return measuredBackupAgents{r.Agents}
	}
	return measuredBackupAgents{agentapi.HTTPClient{}}
}

// measuredBackupAgents records each request in the agent request metrics.
type measuredBackupAgents struct{ inner BackupAgents }

func (m measuredBackupAgents) StartBackup(ctx context.Context, e agentapi.Endpoint, req agentapi.BackupRequest) (result *agentapi.BackupResult, err error) {
	defer func(start time.Time) { agentclient.Record("startbackup", start, err) }(time.Now())
	return m.inner.StartBackup(ctx, e, req)
}

func (m measuredBackupAgents) BackupResult(ctx context.Context, e agentapi.Endpoint, name string) (result *agentapi.BackupResult, err error) {
	defer func(start time.Time) { agentclient.Record("backupresult", start, err) }(time.Now())
	return m.inner.BackupResult(ctx, e, name)
}

// agentBackupName names the backup to the agent: the Backup's name and UID, so that a Backup
// deleted and created again under its name is a new backup.
func agentBackupName(b *pgv1.Backup) string {
	return fmt.Sprintf("%s-%s", b.Name, string(b.UID)[:min(8, len(b.UID))])
}

func backupType(b *pgv1.Backup) pgv1.BackupType {
	if b.Spec.Type == "" {
		return pgv1.BackupFull
	}
	return b.Spec.Type
}

func parseAgentTime(s string) *metav1.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return nil
	}
	m := metav1.NewTime(t)
	return &m
}

// SetupWithManager watches Backups; status writes wake nothing (the reconciler polls a running
// backup itself).
func (r *BackupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&pgv1.Backup{}, ctrlbuilder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Named("backup").
		Complete(r)
}
