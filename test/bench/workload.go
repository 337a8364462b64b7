package main

import (
	"context"
	"fmt"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

const (
	benchNamespace = "bench"
	// createWorkers bounds the benchmark's own request concurrency.
	createWorkers = 16
)

// parallel runs fn for 0..n-1 on a few workers and returns the first error.
func parallel(n int, fn func(i int) error) error {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		next     = make(chan int)
	)
	for range createWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return firstErr
}

func createNamespace(ctx context.Context, c client.Client, name string) error {
	return client.IgnoreAlreadyExists(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
}

func createClusters(ctx context.Context, c client.Client, n int) error {
	if err := createNamespace(ctx, c, benchNamespace); err != nil {
		return err
	}
	return parallel(n, func(i int) error {
		return c.Create(ctx, &pgv1.PostgresCluster{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("db-%04d", i), Namespace: benchNamespace},
			Spec: pgv1.PostgresClusterSpec{
				Instances: 3,
				Storage:   pgv1.StorageSpec{Size: resource.MustParse("1Gi")},
			},
		})
	})
}

// converged reports whether every cluster has all its children and has reached Bootstrapping
// (without kubelets, instances never start, so that is where an idle cluster waits).
func converged(ctx context.Context, c client.Client, n int) (bool, error) {
	managed := client.MatchingLabels{pgbuilder.ManagedByLabel: pgbuilder.ManagedByValue}
	in := client.InNamespace(benchNamespace)
	counts := []struct {
		list client.ObjectList
		want int
	}{
		{&appsv1.StatefulSetList{}, n},
		{&corev1.ServiceList{}, 4 * n},
		{&corev1.ConfigMapList{}, n},
		{&corev1.SecretList{}, 3 * n},
		{&policyv1.PodDisruptionBudgetList{}, n},
	}
	for _, count := range counts {
		if err := c.List(ctx, count.list, in, managed); err != nil {
			return false, err
		}
		if got := meta.LenList(count.list); got < count.want {
			return false, nil
		}
	}
	clusters := &pgv1.PostgresClusterList{}
	if err := c.List(ctx, clusters, in); err != nil {
		return false, err
	}
	for _, cl := range clusters.Items {
		if cl.Status.Phase != pgv1.PhaseBootstrapping || cl.Status.ObservedGeneration != cl.Generation {
			return false, nil
		}
	}
	return len(clusters.Items) == n, nil
}

// churnParameter is the spec change applied to every cluster in the churn phase.
const churnParameter = "work_mem"

func changeEveryCluster(ctx context.Context, c client.Client, n int) error {
	return parallel(n, func(i int) error {
		patch := []byte(`{"spec":{"postgresql":{"parameters":{"` + churnParameter + `":"8MB"}}}}`)
		cl := &pgv1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("db-%04d", i), Namespace: benchNamespace}}
		return c.Patch(ctx, cl, client.RawPatch("application/merge-patch+json", patch))
	})
}

func churnApplied(ctx context.Context, c client.Client, n int) (bool, error) {
	cms := &corev1.ConfigMapList{}
	if err := c.List(ctx, cms, client.InNamespace(benchNamespace),
		client.MatchingLabels{pgbuilder.ManagedByLabel: pgbuilder.ManagedByValue}); err != nil {
		return false, err
	}
	applied := 0
	for _, cm := range cms.Items {
		if strings.Contains(cm.Data[agentapi.PostgresqlConfFile], churnParameter) {
			applied++
		}
	}
	return applied == n, nil
}

// createUnrelated fills other namespaces with Secrets and ConfigMaps pgpilot has no business
// caching, about 1 KiB each, like the application objects of a busy cluster.
func createUnrelated(ctx context.Context, c client.Client, perKind int) error {
	const namespaces = 10
	for i := range namespaces {
		if err := createNamespace(ctx, c, fmt.Sprintf("unrelated-%d", i)); err != nil {
			return err
		}
	}
	payload := strings.Repeat("x", 1024)
	return parallel(2*perKind, func(i int) error {
		meta := metav1.ObjectMeta{Name: fmt.Sprintf("obj-%05d", i/2), Namespace: fmt.Sprintf("unrelated-%d", i%namespaces)}
		if i%2 == 0 {
			return client.IgnoreAlreadyExists(c.Create(ctx, &corev1.Secret{ObjectMeta: meta, StringData: map[string]string{"data": payload}}))
		}
		return client.IgnoreAlreadyExists(c.Create(ctx, &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"data": payload}}))
	})
}
