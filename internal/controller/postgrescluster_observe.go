package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/controller/agentclient"
	"github.com/pgpilot/pgpilot-operator/internal/ha"
)

// podsByClusterIndex indexes the cached pods by their cluster label, so listing one cluster's
// pods is a lookup, not a scan of every pod the cache holds.
const podsByClusterIndex = "pgpilot.cluster"

func indexPodsByCluster(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &corev1.Pod{}, podsByClusterIndex, func(obj client.Object) []string {
		if name, ok := obj.GetLabels()[pgbuilder.ClusterLabel]; ok {
			return []string{name}
		}
		return nil
	})
}

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch

// observe reads how the instances are, once, for the decide stages: the pods from the cache
// and every agent's report, asked concurrently with a timeout.
func (r *PostgresClusterReconciler) observe(ctx context.Context, s *scope) (*stop, error) {
	pods, err := r.instancePods(ctx, s.cluster)
	if err != nil {
		return nil, err
	}
	o := &observed{Observed: ha.Observed{Pods: pods}}
	s.observed = o

	secret := &corev1.Secret{}
	err = r.Get(ctx, client.ObjectKey{Namespace: s.cluster.Namespace, Name: pgbuilder.AgentSecretName(s.cluster)}, secret)
	if apierrors.IsNotFound(err) {
		return nil, nil // just created and not cached yet: decide from the pods alone this time
	}
	if err != nil {
		return nil, fmt.Errorf("get agent secret: %w", err)
	}
	o.token = string(secret.Data[corev1.BasicAuthPasswordKey])
	if s.agentTLS == nil && slices.ContainsFunc(pods, func(p corev1.Pod) bool { return agentclient.ServesTLS(&p) }) {
		return nil, nil // no client certificate to reach them with (loadAgentTLS): not asked
	}
	o.Reports, o.Failures = r.askAgents(ctx, s)
	return nil, nil
}

// instancePods are the cluster's pods as cached, in ordinal order: its StatefulSet's, not any
// pod that carries its labels.
func (r *PostgresClusterReconciler) instancePods(ctx context.Context, c *pgv1.PostgresCluster) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingFields{podsByClusterIndex: c.Name}); err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	instances := slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return !pgbuilder.IsInstancePod(c, &p) })
	slices.SortFunc(instances, func(a, b corev1.Pod) int { return ha.CompareNames(a.Name, b.Name) })
	return instances, nil
}

// unreadyAgentTimeout bounds the question to the agent of a pod the kubelet finds unready, or
// of a primary that already went silent or is being failed over from.
const unreadyAgentTimeout = time.Second

func (r *PostgresClusterReconciler) askAgents(ctx context.Context, s *scope) (map[string]*agentapi.Status, map[string]string) {
	reports, failures := map[string]*agentapi.Status{}, map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	suspect := r.leases().suspected(s.cluster.UID, time.Now())
	for i := range s.observed.Pods {
		pod := &s.observed.Pods[i]
		wg.Go(func() {
			ctx := ctx
			if !ha.PodReady(pod) || (suspect && pod.Name == s.cluster.Status.CurrentPrimary) {
				// Most likely down or cut off: do not let it slow every reconcile of a failover.
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, unreadyAgentTimeout)
				defer cancel()
			}
			status, err := r.agents().Status(ctx, r.endpoint(s, pod))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures[pod.Name] = fmt.Sprintf("ask agent: %v", err)
				return
			}
			reports[pod.Name] = status
		})
	}
	wg.Wait()
	return reports, failures
}
