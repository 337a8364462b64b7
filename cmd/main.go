/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	// Import all Kubernetes client auth plugins (e.g. Azure, GCP, OIDC, etc.)
	// to ensure that exec-entrypoint and run can make use of them.
	_ "k8s.io/client-go/plugin/pkg/client/auth"

	"github.com/KimMachineGun/automemlimit/memlimit"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	postgresv1alpha1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	"github.com/pgpilot/pgpilot-operator/internal/controller"
	"github.com/pgpilot/pgpilot-operator/internal/controller/backup"
	// +kubebuilder:scaffold:imports
)

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))

	utilruntime.Must(postgresv1alpha1.AddToScheme(scheme))
	utilruntime.Must(monitoringv1.AddToScheme(scheme))
	// +kubebuilder:scaffold:scheme
}

// nolint:gocyclo
func main() {
	var metricsAddr, metricsCertPath, metricsCertName, metricsCertKey string
	var enableLeaderElection bool
	var leaderElectionNamespace string
	var leaseDuration, renewDeadline, retryPeriod time.Duration
	var probeAddr string
	var secureMetrics bool
	var enableHTTP2 bool
	var maxConcurrentReconciles int
	var reconcileTimeout time.Duration
	var apiQPS float64
	var apiBurst int
	var pprofAddr string
	var tlsOpts []func(*tls.Config)
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "The address the metrics endpoint binds to. "+
		"Use :8443 for HTTPS or :8080 for HTTP, or leave as 0 to disable the metrics service.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "The address the probe endpoint binds to.")
	flag.BoolVar(&enableLeaderElection, "leader-elect", false,
		"Enable leader election for controller manager. "+
			"Enabling this will ensure there is only one active controller manager.")
	flag.StringVar(&leaderElectionNamespace, "leader-election-namespace", "",
		"Namespace of the leader election Lease. Empty means the namespace the manager runs in, "+
			"which can only be detected in a cluster: set it when running the manager outside one.")
	// The leader renews its Lease with a PUT every retry period, whatever the lease duration:
	// at client-go's 2 s that is all of an idle operator's writes, so the period is 5 s. A
	// failover needs a leading operator, so a crashed leader's successor must not wait long: the
	// duration is 15 s (it was 60 s, then 20 s). The price is the renew deadline: a leader that
	// cannot renew for 10 s (two more tries after a failed one; an API-server outage) gives up
	// and exits, and its successor takes over once the API server answers. A graceful exit
	// releases the Lease. client-go refuses timings where the lease duration does not exceed the
	// renew deadline, or the deadline does not exceed 1.2 retry periods.
	flag.DurationVar(&leaseDuration, "leader-elect-lease-duration", 15*time.Second,
		"How long a standby waits, from the leader's last renewal, before taking the Lease over.")
	flag.DurationVar(&renewDeadline, "leader-elect-renew-deadline", 10*time.Second,
		"How long the leader keeps retrying a failed renewal before it gives up leading and exits.")
	flag.DurationVar(&retryPeriod, "leader-elect-retry-period", 5*time.Second,
		"How often the leader renews the Lease, and a standby tries to acquire it.")
	flag.BoolVar(&secureMetrics, "metrics-secure", true,
		"If set, the metrics endpoint is served securely via HTTPS. Use --metrics-secure=false to use HTTP instead.")
	flag.StringVar(&metricsCertPath, "metrics-cert-path", "",
		"The directory that contains the metrics server certificate.")
	flag.StringVar(&metricsCertName, "metrics-cert-name", "tls.crt", "The name of the metrics server certificate file.")
	flag.StringVar(&metricsCertKey, "metrics-cert-key", "tls.key", "The name of the metrics server key file.")
	flag.BoolVar(&enableHTTP2, "enable-http2", false,
		"If set, HTTP/2 will be enabled for the metrics server")
	flag.IntVar(&maxConcurrentReconciles, "max-concurrent-reconciles", 4,
		"How many PostgresClusters are reconciled in parallel (one key is never handed to two workers).")
	flag.DurationVar(&reconcileTimeout, "reconcile-timeout", 2*time.Minute,
		"Deadline of one reconcile, bounding every API call it makes.")
	// client-go's defaults (5 QPS, burst 10; controller-runtime raises them to 20 and 30) make a
	// thousand new clusters, about twenty requests each, queue for over fifteen minutes on the
	// client alone. The API server's priority and fairness still shares its capacity out; these
	// only stop a runaway operator before it gets there (docs/benchmarks.md has the measurements).
	flag.Float64Var(&apiQPS, "kube-api-qps", defaultAPIQPS,
		"Requests per second the operator's API client sustains (client-side rate limit).")
	flag.IntVar(&apiBurst, "kube-api-burst", defaultAPIBurst,
		"Requests the operator's API client may send at once above --kube-api-qps.")
	flag.StringVar(&pprofAddr, "pprof-bind-address", "",
		"Serve Go's pprof profiles on this address (e.g. 127.0.0.1:6060); empty serves none.")
	opts := zap.Options{
		Development: false,
	}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	setMemoryLimit()

	// if the enable-http2 flag is false (the default), http/2 should be disabled
	// due to its vulnerabilities. More specifically, disabling http/2 will
	// prevent from being vulnerable to the HTTP/2 Stream Cancellation and
	// Rapid Reset CVEs. For more information see:
	// - https://github.com/advisories/GHSA-qppj-fm5r-hxr3
	// - https://github.com/advisories/GHSA-4374-p667-p6c8
	disableHTTP2 := func(c *tls.Config) {
		setupLog.Info("disabling http/2")
		c.NextProtos = []string{"http/1.1"}
	}

	if !enableHTTP2 {
		tlsOpts = append(tlsOpts, disableHTTP2)
	}

	var metricsCertWatcher *certwatcher.CertWatcher

	// Metrics are served over HTTPS to callers that pass a TokenReview and a SubjectAccessReview
	// for GET /metrics (the metrics-reader ClusterRole).
	metricsServerOptions := metricsserver.Options{
		BindAddress:   metricsAddr,
		SecureServing: secureMetrics,
		TLSOpts:       tlsOpts,
	}

	if secureMetrics {
		metricsServerOptions.FilterProvider = filters.WithAuthenticationAndAuthorization
	}

	// Without a certificate, controller-runtime serves the metrics with a self-signed one.
	if len(metricsCertPath) > 0 {
		setupLog.Info("Initializing metrics certificate watcher using provided certificates",
			"metrics-cert-path", metricsCertPath, "metrics-cert-name", metricsCertName, "metrics-cert-key", metricsCertKey)

		var err error
		metricsCertWatcher, err = certwatcher.New(
			filepath.Join(metricsCertPath, metricsCertName),
			filepath.Join(metricsCertPath, metricsCertKey),
		)
		if err != nil {
			setupLog.Error(err, "to initialize metrics certificate watcher", "error", err)
			os.Exit(1)
		}

		metricsServerOptions.TLSOpts = append(metricsServerOptions.TLSOpts, func(config *tls.Config) {
			config.GetCertificate = metricsCertWatcher.GetCertificate
		})
	}

	// WATCH_NAMESPACE comes from the OperatorGroup's target namespaces (OLM) or the deployment.
	watchNamespaces := controller.ParseWatchNamespaces(os.Getenv("WATCH_NAMESPACE"))
	setupLog.Info("watching", "namespaces", watchNamespaces)

	restConfig := ctrl.GetConfigOrDie()
	restConfig.QPS, restConfig.Burst = float32(apiQPS), apiBurst
	podMonitors, err := controller.PodMonitorsServed(restConfig)
	if err != nil {
		setupLog.Error(err, "unable to find out whether PodMonitors are served")
		os.Exit(1)
	}
	setupLog.Info("Prometheus operator", "podMonitorsServed", podMonitors)

	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsServerOptions,
		Cache:                   controller.CacheOptions(watchNamespaces, podMonitors),
		HealthProbeBindAddress:  probeAddr,
		PprofBindAddress:        pprofAddr,
		LeaderElection:          enableLeaderElection,
		LeaderElectionID:        "pgpilot-operator.pgpilot.io",
		LeaderElectionNamespace: leaderElectionNamespace,
		LeaseDuration:           &leaseDuration,
		RenewDeadline:           &renewDeadline,
		RetryPeriod:             &retryPeriod,
		// The process exits as soon as the manager stops, so releasing the lease on the way out
		// is safe, and lets a standby take over without waiting for the lease to expire.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		setupLog.Error(err, "unable to start manager")
		os.Exit(1)
	}

	// Clusters by phase, counted from the cache at each scrape.
	metrics.Registry.MustRegister(controller.ClusterPhases{Reader: mgr.GetCache()})

	agentImage, err := operatorImage(mgr.GetAPIReader())
	if err != nil {
		// Clusters report NoAgentImage until this is fixed; the manager still runs.
		setupLog.Error(err, "cannot tell the operator's own image, which carries the instance agent")
	}

	// One memory of the clusters: the backup reconciler shares its agent TLS configurations, so
	// a deleted cluster is forgotten by both.
	memory := &controller.Memory{}
	if err := (&controller.PostgresClusterReconciler{
		Memory:                  memory,
		Client:                  mgr.GetClient(),
		APIReader:               mgr.GetAPIReader(),
		Recorder:                mgr.GetEventRecorder("pgpilot"),
		PostgresImages:          postgresImages(),
		AgentImage:              agentImage,
		MaxConcurrentReconciles: maxConcurrentReconciles,
		ReconcileTimeout:        reconcileTimeout,
		PodMonitors:             podMonitors,
		OperatorNamespace:       os.Getenv("POD_NAMESPACE"),
	}).SetupWithManager(mgr); err != nil {
		setupLog.Error(err, "unable to create controller", "controller", "PostgresCluster")
		os.Exit(1)
	}
	if err := (&backup.BackupReconciler{
		AgentTLS: memory.AgentTLS(),
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("pgpilot"),
	}).SetupWithManager(mgr); err != nil {
		setupLog.Error(err, "unable to create controller", "controller", "Backup")
		os.Exit(1)
	}
	if err := (&backup.ScheduledBackupReconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("pgpilot"),
	}).SetupWithManager(mgr); err != nil {
		setupLog.Error(err, "unable to create controller", "controller", "ScheduledBackup")
		os.Exit(1)
	}
	// +kubebuilder:scaffold:builder
	if err := mgr.Add(&controller.AdmissionPolicies{Client: mgr.GetClient(), Reader: mgr.GetAPIReader()}); err != nil {
		setupLog.Error(err, "unable to add the admission policies' installer")
		os.Exit(1)
	}

	if metricsCertWatcher != nil {
		setupLog.Info("Adding metrics certificate watcher to manager")
		if err := mgr.Add(metricsCertWatcher); err != nil {
			setupLog.Error(err, "unable to add metrics certificate watcher to manager")
			os.Exit(1)
		}
	}

	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up ready check")
		os.Exit(1)
	}

	setupLog.Info("starting manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "problem running manager")
		os.Exit(1)
	}
}

// operatorImage is the image instance pods copy the agent from: RELATED_IMAGE_AGENT when set
// (OLM's relatedImages convention), else the image this manager runs from, read from its own
// pod (POD_NAME and POD_NAMESPACE come from the downward API), so a kustomize or OLM install
// that rewrites the image needs nothing else.
// postgresImages are pgpilot's PostgreSQL images by major, as RELATED_IMAGE_POSTGRES_<major>
// name them (OLM rewrites these for mirrors).
func postgresImages() map[int32]string {
	images := map[int32]string{}
	for _, major := range controller.SupportedPostgresMajors {
		if image := os.Getenv(controller.PostgresImageVariable(major)); image != "" {
			images[major] = image
		}
	}
	return images
}

func operatorImage(reader client.Reader) (string, error) {
	if image := os.Getenv("RELATED_IMAGE_AGENT"); image != "" {
		return image, nil
	}
	name, namespace := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE")
	if name == "" || namespace == "" {
		return "", errors.New("set RELATED_IMAGE_AGENT, or POD_NAME and POD_NAMESPACE when running in a pod")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pod := &corev1.Pod{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
		return "", fmt.Errorf("read own pod %s/%s: %w", namespace, name, err)
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == "manager" {
			return c.Image, nil
		}
	}
	return "", fmt.Errorf("pod %s/%s has no container named manager", namespace, name)
}

// Defaults of --kube-api-qps and --kube-api-burst, chosen with `make bench`.
const (
	defaultAPIQPS   = 200
	defaultAPIBurst = 400
)

// setMemoryLimit sets the Go runtime's soft memory limit (GOMEMLIMIT) to 90 % of the container's
// memory limit (its cgroup), so the garbage collector works harder before the kernel kills the
// process instead. GOMEMLIMIT or AUTOMEMLIMIT in the environment take precedence.
func setMemoryLimit() {
	limit, err := memlimit.Set(memlimit.WithRatio(0.9))
	switch {
	case err != nil:
		setupLog.Error(err, "cannot set GOMEMLIMIT from the cgroup's memory limit; running without one")
	case limit == math.MaxInt64:
		setupLog.Info("no memory limit: GOMEMLIMIT unset")
	default:
		setupLog.Info("memory limit", "GOMEMLIMIT", limit)
	}
}
