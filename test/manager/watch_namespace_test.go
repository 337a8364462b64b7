package manager_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// OLM's OwnNamespace, SingleNamespace and MultiNamespace install modes hand the manager its
// namespaces through WATCH_NAMESPACE; clusters elsewhere must be left alone.
var _ = Describe("WATCH_NAMESPACE", func() {
	It("reconciles clusters in the listed namespaces only", func(ctx SpecContext) {
		scheme := runtime.NewScheme()
		utilruntime.Must(clientgoscheme.AddToScheme(scheme))
		utilruntime.Must(pgv1.AddToScheme(scheme))
		c, err := client.New(cp.Config, client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())

		namespace := func() string {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "watch-"}}
			Expect(c.Create(ctx, ns)).To(Succeed())
			return ns.Name
		}
		first, second, outside := namespace(), namespace(), namespace()
		startManagerWithEnv("scoped", []string{"WATCH_NAMESPACE=" + first + ", " + second})

		clusterIn := func(ns string) *pgv1.PostgresCluster {
			cluster := &pgv1.PostgresCluster{
				ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
				Spec:       pgv1.PostgresClusterSpec{Instances: 1, Storage: pgv1.StorageSpec{Size: resource.MustParse("1Gi")}},
			}
			Expect(c.Create(ctx, cluster)).To(Succeed())
			return cluster
		}
		watched := []*pgv1.PostgresCluster{clusterIn(first), clusterIn(second)}
		ignored := clusterIn(outside)

		for _, cluster := range watched {
			Eventually(func(g Gomega) {
				g.Expect(c.Get(ctx, client.ObjectKeyFromObject(cluster), cluster)).To(Succeed())
				g.Expect(cluster.Status.Phase).NotTo(BeEmpty())
				g.Expect(c.Get(ctx, client.ObjectKeyFromObject(cluster), &appsv1.StatefulSet{})).To(Succeed())
			}).Should(Succeed(), "cluster in watched namespace %s", cluster.Namespace)
		}
		Consistently(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(ignored), ignored)).To(Succeed())
			g.Expect(ignored.Status.Phase).To(BeEmpty())
			err := c.Get(ctx, client.ObjectKeyFromObject(ignored), &appsv1.StatefulSet{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
		}, 5*time.Second).Should(Succeed(), "cluster outside WATCH_NAMESPACE must be ignored")
	})
})
