package controller

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// defaultRequeueInterval is how long to wait before looking again at something that is not
// ready yet. Watches on the StatefulSet and the pods usually trigger the next reconcile sooner.
const defaultRequeueInterval = 15 * time.Second

// staleRetry is the delay before retrying a status write that raced a newer version.
const staleRetry = time.Second

// defaultHealthInterval: a running cluster is looked at this often even when nothing changes,
// to notice what only the agents can tell (a replica that stopped streaming, lag).
const defaultHealthInterval = 30 * time.Second

// settlingInterval: a cluster with a primary that is not all ready (a replica reconnecting,
// catching up) is looked at this often, so that Ready follows what only the agents can tell
// within seconds; nothing in the API changes when a replica starts streaming again.
const settlingInterval = 5 * time.Second

// PostgresClusterReconciler drives PostgresClusters towards their spec.
type PostgresClusterReconciler struct {
	client.Client
	// APIReader reads what the label-scoped cache cannot hold: the user's own Secrets.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// PostgresImages are pgpilot's PostgreSQL images by major, for clusters without spec.image
	// (the operator's RELATED_IMAGE_POSTGRES_<major>).
	PostgresImages map[int32]string
	// AgentImage is the operator's own image, which carries the instance agent.
	AgentImage string
	// MaxConcurrentReconciles is safe above 1: the workqueue never hands one key to two workers.
	MaxConcurrentReconciles int
	// ReconcileTimeout bounds one reconcile and with it every API call it makes.
	ReconcileTimeout time.Duration
	// RequeueInterval is the "not yet" delay; zero means defaultRequeueInterval.
	RequeueInterval time.Duration
	// HealthInterval is how often a running cluster's agents are asked for their status;
	// zero means defaultHealthInterval.
	HealthInterval time.Duration
	// AgentAddress finds an instance's agent; nil means AgentAddress (pod IP, agent port).
	AgentAddress func(*corev1.Pod) string
	// Agents talks to the instance agents; nil means agentapi.HTTPClient.
	Agents AgentClient
	// UpgradeAgents runs major upgrades on the instance agents; nil means agentapi.HTTPClient.
	UpgradeAgents MajorUpgradeAgents
	// CatalogAgents applies managed roles and databases on the primary's agent; nil means
	// agentapi.HTTPClient.
	CatalogAgents CatalogAgents
	// RefusalBackoff is how long a cluster whose children the API server refused for good holds
	// back its writes; zero means defaultRefusalBackoff.
	RefusalBackoff time.Duration
	// OperatorNamespace is where the operator runs (POD_NAMESPACE), whose pods a cluster's
	// NetworkPolicy admits to the agent API; empty for an operator outside the cluster.
	OperatorNamespace string
	// PodMonitors: the API server serves the Prometheus operator's PodMonitor
	// (PodMonitorsServed), so clusters may ask for one.
	PodMonitors bool
	// Now is the clock certificates are issued and renewed by; nil means time.Now.
	Now func() time.Time

	// Memory is what the process remembers of each cluster (memory.go); nil means its own. The
	// backup reconciler shares it, so a deleted cluster is forgotten by both.
	Memory     *Memory
	memoryOnce sync.Once

	leaseOnce    sync.Once
	leaseTracker *leaseTracker
	// leaseAlarms carries the clusters whose primary Lease stopped being renewed.
	leaseAlarms chan event.TypedGenericEvent[types.NamespacedName]
}

// maxWatchedWaitPoll bounds the polling of a wait that a watch event ends (watchedWaitPoll).
const maxWatchedWaitPoll = 2 * time.Minute

// watchedWaitPoll is when to look again at a cluster that has waited for so long for something
// a watch reports (a pod becoming ready): the event brings the next reconcile, so polling is only
// a safety net, and it slows down as the wait goes on — half the time waited so far, between the
// requeue interval and maxWatchedWaitPoll — instead of costing every waiting cluster a
// reconcile every requeue interval for as long as it waits.
func (r *PostgresClusterReconciler) watchedWaitPoll(waited time.Duration) time.Duration {
	return min(max(waited/2, r.notYet().RequeueAfter), maxWatchedWaitPoll)
}

func (r *PostgresClusterReconciler) notYet() ctrl.Result {
	if r.RequeueInterval > 0 {
		return ctrl.Result{RequeueAfter: r.RequeueInterval}
	}
	return ctrl.Result{RequeueAfter: defaultRequeueInterval}
}

// +kubebuilder:rbac:groups=postgres.pgpilot.io,resources=postgresclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=postgres.pgpilot.io,resources=postgresclusters/status,verbs=get;patch
// +kubebuilder:rbac:groups=postgres.pgpilot.io,resources=postgresclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile runs the stages in order, then writes what it observed into status.
func (r *PostgresClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cluster := &pgv1.PostgresCluster{}
	if err := r.Get(ctx, req.NamespacedName, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			r.memory().forget(req.NamespacedName)
			return ctrl.Result{}, r.releaseDatabases(ctx, req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if !cluster.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, cluster)
	}

	s := newScope(cluster)
	result, err := r.runLanes(ctx, s)
	r.announceWrites(s)
	stale, statusErr := r.updateStatus(ctx, s, err)
	if before, after := s.original.ResourceVersion, s.cluster.ResourceVersion; after != before {
		r.memory().unchanged.statusWritten(req.NamespacedName, before, after)
	}
	if err = errors.Join(err, statusErr); err != nil {
		return ctrl.Result{}, err
	}
	if s.primary != "" {
		// The HA lane looks at a running cluster this often whatever the children's lane waits
		// for: a refused child holds its writes for minutes, never the health check.
		health := cmp.Or(r.HealthInterval, defaultHealthInterval)
		if s.failure == nil && s.observed.Reports != nil && !assessHealth(s).allReady() {
			health = min(health, settlingInterval)
		}
		result.RequeueAfter = sooner(result.RequeueAfter, health)
	}
	if due := s.renewAt.Sub(r.now()); !s.renewAt.IsZero() && (result.RequeueAfter == 0 || due < result.RequeueAfter) {
		result.RequeueAfter = max(due, time.Second) // renew certificates in time
	}
	if stale && (result.RequeueAfter == 0 || result.RequeueAfter > staleRetry) {
		// The cluster changed since the cache served it: look again once the cache caught up.
		return ctrl.Result{RequeueAfter: staleRetry}, nil
	}
	return result, nil
}

// SetupWithManager watches the cluster (spec changes only: status writes must not trigger
// reconciles), every owned kind, and the instance pods.
func (r *PostgresClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := indexPodsByCluster(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if err := indexDatabasesByCluster(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	r.leaseAlarms = make(chan event.TypedGenericEvent[types.NamespacedName])
	if err := mgr.Add(manager.RunnableFunc(r.alarmStaleLeases)); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr)
	if r.PodMonitors {
		b = b.Owns(&monitoringv1.PodMonitor{})
	}
	return b.
		// Spec changes, and annotations: the switchover trigger is one.
		For(&pgv1.PostgresCluster{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Owns(&corev1.Secret{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podToCluster)).
		Watches(&pgv1.Database{}, handler.EnqueueRequestsFromMapFunc(databaseToCluster), builder.WithPredicates(databaseChanged)).
		WatchesRawSource(source.Kind(mgr.GetCache(), &coordinationv1.Lease{}, r.leaseWatchHandler())).
		WatchesRawSource(source.Channel(r.leaseAlarms, enqueueAlarm)).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: max(1, r.MaxConcurrentReconciles),
			ReconciliationTimeout:   r.ReconcileTimeout,
			// Per-item backoff only: one failing cluster retries slower and slower on its own,
			// without a shared bucket that would delay every other cluster.
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, 5*time.Minute),
		}).
		Named("postgrescluster").
		Complete(r)
}

// podToCluster maps an instance pod to its cluster through the cluster label.
func podToCluster(_ context.Context, obj client.Object) []reconcile.Request {
	name, ok := obj.GetLabels()[pgbuilder.ClusterLabel]
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}}}
}
