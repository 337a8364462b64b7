//go:build e2e

// Package e2e runs pgpilot end to end on a real single-node cluster (hack/localcluster): the
// operator deployed from its image with the manifests of `make deploy`, PostgreSQL pods from a
// real PostgreSQL image, volumes from a dynamic provisioner. The build tag keeps these specs out
// of `go test ./...`; `make test-e2e` (test/e2e/run.sh) brings the cluster up, deploys the
// operator and runs them on the node's network through `localcluster exec`. Then it removes that
// operator, installs OLM (`localcluster olm`) and runs the specs labelled "olm": pgpilot
// installed, upgraded and scored through OLM from its catalog image.
package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	operatorsv1 "github.com/operator-framework/api/pkg/operators/v1"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// Names `make deploy` (config/default) gives the operator's objects.
const (
	operatorNamespace  = "pgpilot-operator-system"
	operatorDeployment = "pgpilot-operator-controller-manager"
	metricsReaderRole  = "pgpilot-operator-metrics-reader"
)

// operatorReacts bounds a wait for what the operator does at once (a Secret re-created, a
// condition set). Not seconds: a failover spec SIGKILLs the operator while other specs run, and
// its successor leads only once the killed one's Lease expired (--leader-elect-lease-duration,
// 15 s; then a retry period, 5 s), after its container restarted.
const operatorReacts = 2 * time.Minute

// The deploy phase runs specs on several processes, and ends when its busiest process does: the
// longest containers start first, one per process, and the shorter ones fill in after them
// (longest first). By the times of the warm CI run of 4245a23, when the sample cluster and
// streaming replication had no priority and started last on the process that had the major
// upgrade and monitoring: it ran 796 s, another 517 s.
const (
	longestSpecs = 30 // backup and recovery, streaming replication, the sample cluster: 290-325 s
	slowestSpecs = 20 // failover, the major upgrade: 265-275 s
	slowerSpecs  = 15 // monitoring: 215 s
	slowSpecs    = 10 // PostgreSQL 18's cluster, node loss: 80-130 s
)

var (
	k8s       client.Client
	clientset *kubernetes.Clientset
	// restConfig reaches the API server as k8s and clientset do, for exec into pods.
	restConfig *rest.Config
	// httpcheckImage is a tiny static HTTP client (hack/localcluster/src/httpcheck), loaded into
	// the cluster by localcluster; specs run it in pods to look at Services from inside.
	httpcheckImage string
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	SetDefaultEventuallyTimeout(3 * time.Minute)
	SetDefaultEventuallyPollingInterval(time.Second)
	RunSpecs(t, "pgpilot e2e suite (hack/localcluster)")
}

var _ = BeforeSuite(func() {
	// The client logs the API server's warnings, e.g. fields an earlier release's CRD prunes.
	ctrllog.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	httpcheckImage = os.Getenv("E2E_HTTPCHECK_IMAGE")
	Expect(httpcheckImage).NotTo(BeEmpty(),
		"E2E_HTTPCHECK_IMAGE is unset: run the suite with `make test-e2e` (test/e2e/run.sh)")

	cfg, err := config.GetConfig()
	Expect(err).NotTo(HaveOccurred(), "no kubeconfig: run the suite through `localcluster exec`")
	restConfig = cfg
	scheme := runtime.NewScheme()
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(pgv1.AddToScheme(scheme)).To(Succeed())
	Expect(operatorsv1.AddToScheme(scheme)).To(Succeed())
	Expect(operatorsv1alpha1.AddToScheme(scheme)).To(Succeed())
	Expect(monitoringv1.AddToScheme(scheme)).To(Succeed())
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	clientset, err = kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())

	// The cluster must have a default StorageClass; volume claims of the specs rely on it.
	Eventually(func(g Gomega) {
		var classes storageClassList
		g.Expect(k8s.List(context.Background(), &classes.StorageClassList)).To(Succeed())
		g.Expect(classes.defaultName()).NotTo(BeEmpty(), "no default StorageClass")
	}).WithTimeout(30 * time.Second).Should(Succeed())
})

// newNamespace creates a namespace for one spec and deletes it when the spec ends.
func newNamespace(ctx context.Context, prefix string) string {
	ns := &corev1.Namespace{}
	ns.GenerateName = prefix + "-"
	Expect(k8s.Create(ctx, ns)).To(Succeed())
	specNamespaces = append(specNamespaces, ns.Name)
	DeferCleanup(func(ctx SpecContext) {
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, ns))).To(Succeed())
	})
	return ns.Name
}
