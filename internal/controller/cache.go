package controller

import (
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// CacheOptions limits the manager's cache to the namespaces it watches and, for the kinds
// pgpilot owns, to objects it labelled: unrelated Secrets, ConfigMaps and Pods in the cluster
// cost it no memory. podMonitors adds the Prometheus operator's PodMonitors, where they are
// served (PodMonitorsServed). Cached objects carry no managedFields: nothing reads them from
// the cache (server-side apply works on the API server), and they are a large part of each.
func CacheOptions(namespaces []string, podMonitors bool) cache.Options {
	managed := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{pgbuilder.ManagedByLabel: pgbuilder.ManagedByValue})}
	opts := cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}:                managed,
		&corev1.ConfigMap{}:             managed,
		&corev1.Service{}:               managed,
		&corev1.Pod{}:                   managed,
		&appsv1.StatefulSet{}:           managed,
		&policyv1.PodDisruptionBudget{}: managed,
		&networkingv1.NetworkPolicy{}:   managed,
		&corev1.ServiceAccount{}:        managed,
		&rbacv1.Role{}:                  managed,
		&rbacv1.RoleBinding{}:           managed,
		&coordinationv1.Lease{}:         managed,
	}}
	if podMonitors {
		opts.ByObject[&monitoringv1.PodMonitor{}] = managed
	}
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}

// ParseWatchNamespaces reads WATCH_NAMESPACE as OLM sets it: empty for all namespaces, one
// name, or a comma-separated list.
func ParseWatchNamespaces(value string) []string {
	var namespaces []string
	for _, ns := range strings.Split(value, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			namespaces = append(namespaces, ns)
		}
	}
	return namespaces
}
