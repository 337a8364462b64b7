package controller

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	"github.com/pgpilot/pgpilot-operator/internal/controller/agentclient"
	"github.com/pgpilot/pgpilot-operator/test/controlplane"
)

// The suite runs the real reconciler in a real manager against a real kube-apiserver and
// kube-controller-manager; k8sClient is an uncached client acting as the user.
var (
	ctx       context.Context
	cancel    context.CancelFunc
	cp        *controlplane.ControlPlane
	k8sClient client.Client
	// managerCache is what the reconciler reads: a spec that waits for the reconciler to
	// have seen a change reads it here.
	managerCache client.Reader
	scheme       = runtime.NewScheme()
	writes       = &writeCounter{byNamespace: map[string]int{}}
	// testReconciler is the reconciler the manager runs, for specs that look into its memory.
	testReconciler *PostgresClusterReconciler
	// testClock is the reconciler's clock; specs move it on to make certificates due.
	testClock = &shiftedClock{}
)

// shiftedClock is the wall clock moved on by an offset.
type shiftedClock struct{ offset atomic.Int64 }

func (c *shiftedClock) now() time.Time           { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *shiftedClock) advance(by time.Duration) { c.offset.Add(int64(by)) }

const (
	testImage           = "registry.example/postgresql:17"
	testAgentImage      = "registry.example/pgpilot-operator:test"
	testRequeueInterval = time.Second
)

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(200 * time.Millisecond)
	RunSpecs(t, "Controller Suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(pgv1.AddToScheme(scheme))
	utilruntime.Must(monitoringv1.AddToScheme(scheme))
	ctx, cancel = context.WithCancel(context.Background())

	var err error
	cp, err = controlplane.Start(filepath.Join("..", "..", "config", "crd", "bases"),
		filepath.Join("..", "..", "test", "crds", "prometheus-operator"))
	Expect(err).NotTo(HaveOccurred())
	k8sClient, err = client.New(cp.Config, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())

	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  CacheOptions(nil, true),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	Expect(err).NotTo(HaveOccurred())
	managerCache = mgr.GetCache()
	reconciler := &PostgresClusterReconciler{
		Client:                  countingClient{Client: mgr.GetClient(), writes: writes},
		APIReader:               mgr.GetAPIReader(),
		Recorder:                mgr.GetEventRecorder("pgpilot"),
		PostgresImages:          map[int32]string{15: "registry.example/postgresql:15", 17: testImage, 18: "registry.example/postgresql:18"},
		AgentImage:              testAgentImage,
		MaxConcurrentReconciles: 2,
		ReconcileTimeout:        30 * time.Second,
		RequeueInterval:         testRequeueInterval,
		HealthInterval:          testRequeueInterval,
		AgentAddress:            agentAddresses.lookup,
		PodMonitors:             true,
		OperatorNamespace:       testOperatorNamespace,
		Now:                     testClock.now,
	}
	Expect(reconciler.SetupWithManager(mgr)).To(Succeed())
	testReconciler = reconciler
	go func() {
		defer GinkgoRecover()
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
})

var _ = AfterSuite(func() {
	if cancel != nil {
		cancel()
	}
	if cp != nil {
		Expect(cp.Stop()).To(Succeed())
	}
})

// agentAddresses routes the operator to agents running in this process for the pods that have
// one (envtest runs no kubelet, so pods have no IPs of their own).
var agentAddresses = &addressBook{byPod: map[string]string{}}

type addressBook struct {
	mu    sync.Mutex
	byPod map[string]string
}

func (b *addressBook) set(namespace, pod, address string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.byPod[namespace+"/"+pod] = address
}

func (b *addressBook) lookup(pod *corev1.Pod) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if address, ok := b.byPod[pod.Namespace+"/"+pod.Name]; ok {
		return address
	}
	return agentclient.Address(pod)
}

// writeCounter counts the reconciler's writes per namespace, no-op applies included, which
// resourceVersions alone would not reveal.
type writeCounter struct {
	mu          sync.Mutex
	byNamespace map[string]int
}

func (w *writeCounter) add(namespace string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.byNamespace[namespace]++
}

func (w *writeCounter) count(namespace string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.byNamespace[namespace]
}

// countingClient is the manager's (cached) client with every write counted by namespace.
type countingClient struct {
	client.Client
	writes *writeCounter
}

func (c countingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.writes.add(obj.GetNamespace())
	return c.Client.Create(ctx, obj, opts...)
}

func (c countingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c.writes.add(obj.GetNamespace())
	return c.Client.Update(ctx, obj, opts...)
}

func (c countingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	c.writes.add(obj.GetNamespace())
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c countingClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	namespace := "" // cluster-scoped
	if ns, ok := obj.(interface{ GetNamespace() *string }); ok && ns.GetNamespace() != nil {
		namespace = *ns.GetNamespace()
	}
	c.writes.add(namespace)
	return c.Client.Apply(ctx, obj, opts...)
}

func (c countingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	c.writes.add(obj.GetNamespace())
	return c.Client.Delete(ctx, obj, opts...)
}

func (c countingClient) Status() client.SubResourceWriter {
	return countingStatusWriter{SubResourceWriter: c.Client.Status(), writes: c.writes}
}

type countingStatusWriter struct {
	client.SubResourceWriter
	writes *writeCounter
}

func (w countingStatusWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	w.writes.add(obj.GetNamespace())
	return w.SubResourceWriter.Update(ctx, obj, opts...)
}

func (w countingStatusWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	w.writes.add(obj.GetNamespace())
	return w.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}
