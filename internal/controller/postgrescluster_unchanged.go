package controller

import (
	"context"
	"reflect"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Most reconciles of a running or waiting cluster find every owned object as it was applied.
// Building the desired objects and comparing them with the cache is nearly all of such a
// reconcile's CPU, so a cluster whose inputs and owned objects are exactly as they were when
// they were last found up to date skips it. The cluster's resourceVersion changes with its spec,
// metadata (annotations such as the restart trigger) and status, which covers everything the
// builders read besides the operator's own settings (the reconciler's own status patches carry
// the record over); an owned object's changes with any edit, so drift and deletion still lead
// to the full comparison and a repair.

// unchangedChildren remembers, per cluster, what the ensure stages last found up to date.
type unchangedChildren struct {
	mu        sync.Mutex
	byCluster map[types.NamespacedName]ensuredRecord
}

// ensuredRecord is one cluster's owned objects as last found up to date, with what the ensure
// stages derived from them.
type ensuredRecord struct {
	clusterUID     types.UID
	clusterVersion string
	children       []ensuredChild
	configHash     string
}

type ensuredChild struct {
	kind    reflect.Type
	key     client.ObjectKey
	version string
}

func (u *unchangedChildren) get(key types.NamespacedName) (ensuredRecord, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	record, ok := u.byCluster[key]
	return record, ok
}

func (u *unchangedChildren) set(key types.NamespacedName, record ensuredRecord) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.byCluster == nil {
		u.byCluster = map[types.NamespacedName]ensuredRecord{}
	}
	u.byCluster[key] = record
}

// statusWritten carries a record over the cluster's own status patch, which moved its
// resourceVersion from before to after: the builders read no status (TestBuildersIgnoreStatus
// in internal/builder), so the owned objects found up to date still are.
func (u *unchangedChildren) statusWritten(key types.NamespacedName, before, after string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if record, ok := u.byCluster[key]; ok && record.clusterVersion == before {
		record.clusterVersion = after
		u.byCluster[key] = record
	}
}

func (u *unchangedChildren) forget(key types.NamespacedName) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.byCluster, key)
}

// noteEnsured records an owned object an ensure stage found up to date (written false) or had
// to write; a reconcile that wrote remembers nothing, and the next one compares again.
func (s *scope) noteEnsured(live client.Object, written bool) {
	if written {
		s.childrenWritten = true
		return
	}
	s.ensured = append(s.ensured, ensuredChild{kind: reflect.TypeOf(live).Elem(),
		key: client.ObjectKeyFromObject(live), version: live.GetResourceVersion()})
}

// skipUnchangedChildren lets the ensure stages skip their work when the cluster and every
// owned object are as they were when last found up to date.
func (r *PostgresClusterReconciler) skipUnchangedChildren(ctx context.Context, s *scope) (*stop, error) {
	key := client.ObjectKeyFromObject(s.cluster)
	record, ok := r.memory().unchanged.get(key)
	if !ok || record.clusterUID != s.cluster.UID || record.clusterVersion != s.cluster.ResourceVersion {
		return nil, nil
	}
	var statefulSet *appsv1.StatefulSet
	for _, child := range record.children {
		live := reflect.New(child.kind).Interface().(client.Object)
		switch err := r.Get(ctx, child.key, live); {
		case apierrors.IsNotFound(err):
			return nil, nil
		case err != nil:
			return nil, err
		case live.GetResourceVersion() != child.version:
			return nil, nil
		}
		if sts, ok := live.(*appsv1.StatefulSet); ok {
			statefulSet = sts
		}
	}
	s.childrenUnchanged, s.statefulSet, s.configHash = true, statefulSet, record.configHash
	return nil, nil
}

// unlessUnchanged runs an ensure stage only when skipUnchangedChildren did not find the owned
// objects as they were last found up to date. (The monitoring stage skips only its PodMonitor:
// its checks of the user's custom query sources read what is outside the record.)
func unlessUnchanged(run func(context.Context, *scope) (*stop, error)) func(context.Context, *scope) (*stop, error) {
	return func(ctx context.Context, s *scope) (*stop, error) {
		if s.childrenUnchanged {
			return nil, nil
		}
		return run(ctx, s)
	}
}

// rememberUnchangedChildren records a reconcile whose ensure stages all found their objects up
// to date, for the next one to skip them. While some instance still runs without certificates
// nothing is remembered: its pod's replacement, not one of the records' objects, changes the
// ConfigMap (TLS becomes required).
func (r *PostgresClusterReconciler) rememberUnchangedChildren(_ context.Context, s *scope) (*stop, error) {
	if s.childrenUnchanged || s.childrenWritten || !s.tlsRequired {
		return nil, nil
	}
	r.memory().unchanged.set(client.ObjectKeyFromObject(s.cluster), ensuredRecord{clusterUID: s.cluster.UID,
		clusterVersion: s.cluster.ResourceVersion, children: s.ensured, configHash: s.configHash})
	return nil, nil
}
