package controller

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// Database objects are reconciled by their cluster's reconciler, in the catalog lane: they go to
// the primary's agent with spec.roles, and their status comes back from its report. A Database
// with reclaimPolicy delete carries a finalizer while its cluster runs, so that deleting it drops
// the database first; when the cluster is gone there is nothing left to drop, and the finalizer
// goes (releaseDatabases).

// +kubebuilder:rbac:groups=postgres.pgpilot.io,resources=databases,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=postgres.pgpilot.io,resources=databases/status,verbs=get;patch
// +kubebuilder:rbac:groups=postgres.pgpilot.io,resources=databases/finalizers,verbs=update

const databasesByClusterIndex = "spec.cluster.name"

func indexDatabasesByCluster(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &pgv1.Database{}, databasesByClusterIndex, databaseCluster)
}

func databaseCluster(obj client.Object) []string {
	return []string{obj.(*pgv1.Database).Spec.Cluster.Name}
}

// databaseToCluster maps a Database to its cluster.
func databaseToCluster(_ context.Context, obj client.Object) []reconcile.Request {
	db := obj.(*pgv1.Database)
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: db.Namespace, Name: db.Spec.Cluster.Name}}}
}

// databaseChanged passes a Database's creation, spec changes, deletion and its finalizers
// going, never its status writes.
var databaseChanged = predicate.Or(predicate.GenerationChangedPredicate{}, predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		return !e.ObjectNew.GetDeletionTimestamp().IsZero() && !slices.Equal(e.ObjectOld.GetFinalizers(), e.ObjectNew.GetFinalizers()) ||
			e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
	},
})

// clusterDatabases are the Databases that name the cluster, from the cache.
func (r *PostgresClusterReconciler) clusterDatabases(ctx context.Context, namespace, cluster string) ([]pgv1.Database, error) {
	list := &pgv1.DatabaseList{}
	if err := r.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{databasesByClusterIndex: cluster}); err != nil {
		return nil, fmt.Errorf("list databases: %w", err)
	}
	return list.Items, nil
}

// ensureDatabaseFinalizers puts the drop finalizer on each Database with reclaimPolicy delete,
// and takes it off one whose policy became retain.
func (r *PostgresClusterReconciler) ensureDatabaseFinalizers(ctx context.Context, databases []pgv1.Database) error {
	for i := range databases {
		db := &databases[i]
		want := db.Spec.ReclaimPolicy == pgv1.ReclaimDelete
		if want == controllerutil.ContainsFinalizer(db, pgv1.DatabaseDropFinalizer) || (want && !db.DeletionTimestamp.IsZero()) {
			continue
		}
		if err := r.setDatabaseFinalizer(ctx, db, want); err != nil {
			return err
		}
	}
	return nil
}

func (r *PostgresClusterReconciler) setDatabaseFinalizer(ctx context.Context, db *pgv1.Database, present bool) error {
	original := db.DeepCopy()
	if present {
		controllerutil.AddFinalizer(db, pgv1.DatabaseDropFinalizer)
	} else {
		controllerutil.RemoveFinalizer(db, pgv1.DatabaseDropFinalizer)
	}
	if err := r.Patch(ctx, db, client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{})); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("database %s: finalizer: %w", db.Name, err)
	}
	return nil
}

// writeDatabaseStatuses writes each Database's state from the agent's report (nil: none yet for
// the set the Databases are in) and refused, and lets a deleted one go once its database is
// dropped, or at once when another Database declares its database.
func (r *PostgresClusterReconciler) writeDatabaseStatuses(ctx context.Context, databases []pgv1.Database, report *agentapi.CatalogReport, refused map[string]string) error {
	results := map[string]agentapi.DatabaseResult{}
	if report != nil {
		for _, result := range report.Databases {
			results[result.Name] = result
		}
	}
	for i := range databases {
		db := &databases[i]
		result, reported := results[db.Spec.Name]
		if !db.DeletionTimestamp.IsZero() {
			gone := reported && (result.State == agentapi.ItemAbsent || result.State == agentapi.DatabaseKept)
			if controllerutil.ContainsFinalizer(db, pgv1.DatabaseDropFinalizer) && (refused[db.Name] != "" || gone) {
				if result.State == agentapi.DatabaseKept && r.Recorder != nil {
					r.Recorder.Eventf(db, nil, corev1.EventTypeWarning, "DatabaseKept", "DropDatabase",
						"database %s was not dropped: pgpilot did not make it, and never drops such a database", db.Spec.Name)
				}
				if err := r.setDatabaseFinalizer(ctx, db, false); err != nil {
					return err
				}
				continue // gone
			}
			if !reported {
				continue
			}
		}
		status := db.Status.DeepCopy()
		switch {
		case refused[db.Name] != "":
			*status = pgv1.DatabaseStatus{ObservedGeneration: db.Generation, State: agentapi.RoleError, Message: refused[db.Name]}
		case reported:
			*status = databaseStatus(db.Generation, result)
		case status.State == "":
			*status = pgv1.DatabaseStatus{State: agentapi.ItemPending, Message: "waiting for the cluster's primary to apply it"}
		}
		if err := r.patchDatabaseStatus(ctx, db, *status); err != nil {
			return err
		}
	}
	return nil
}

func databaseStatus(generation int64, result agentapi.DatabaseResult) pgv1.DatabaseStatus {
	items := func(results []agentapi.ItemResult) []pgv1.DatabaseItemStatus {
		if len(results) == 0 {
			return nil // as the API server gives an empty list back: status compares equal
		}
		out := make([]pgv1.DatabaseItemStatus, 0, len(results))
		for _, item := range results {
			out = append(out, pgv1.DatabaseItemStatus{Name: item.Name, State: item.State, Version: item.Version,
				Changed: item.Changed, Message: item.Message})
		}
		return out
	}
	return pgv1.DatabaseStatus{ObservedGeneration: generation, State: result.State, Changed: result.Changed,
		Message: result.Message, Schemas: items(result.Schemas), Extensions: items(result.Extensions)}
}

// patchDatabaseStatus writes status when it differs, with an Event when the state or message is
// news: drift and errors as Warnings.
func (r *PostgresClusterReconciler) patchDatabaseStatus(ctx context.Context, db *pgv1.Database, status pgv1.DatabaseStatus) error {
	if reflect.DeepEqual(db.Status, status) {
		return nil
	}
	news := db.Status.State != status.State || db.Status.Message != status.Message || !slices.Equal(db.Status.Changed, status.Changed)
	original := db.DeepCopy()
	db.Status = status
	if err := r.Status().Patch(ctx, db, client.MergeFrom(original)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("database %s: status: %w", db.Name, err)
	}
	if !news || r.Recorder == nil {
		return nil
	}
	switch status.State {
	case agentapi.RoleDrift:
		r.Recorder.Eventf(db, nil, corev1.EventTypeWarning, "DatabaseDrift", "ApplyDatabase", "database %s was changed by hand and put back: %v", db.Spec.Name, status.Changed)
	case agentapi.RoleError:
		r.Recorder.Eventf(db, nil, corev1.EventTypeWarning, "DatabaseFailed", "ApplyDatabase", "database %s: %s", db.Spec.Name, status.Message)
	case agentapi.RoleApplied:
		if len(status.Changed) > 0 {
			r.Recorder.Eventf(db, nil, corev1.EventTypeNormal, "DatabaseApplied", "ApplyDatabase", "database %s: %v", db.Spec.Name, status.Changed)
		}
	}
	return nil
}

// releaseDatabases lets the Databases of a cluster that is gone be deleted, and says why nothing
// applies them.
func (r *PostgresClusterReconciler) releaseDatabases(ctx context.Context, cluster client.ObjectKey) error {
	databases, err := r.clusterDatabases(ctx, cluster.Namespace, cluster.Name)
	if err != nil {
		return err
	}
	for i := range databases {
		db := &databases[i]
		if controllerutil.ContainsFinalizer(db, pgv1.DatabaseDropFinalizer) {
			if err := r.setDatabaseFinalizer(ctx, db, false); err != nil {
				return err
			}
		}
		if db.DeletionTimestamp.IsZero() {
			status := pgv1.DatabaseStatus{State: agentapi.ItemPending, Message: fmt.Sprintf("PostgresCluster %s does not exist", cluster.Name)}
			if err := r.patchDatabaseStatus(ctx, db, status); err != nil {
				return err
			}
		}
	}
	return nil
}
