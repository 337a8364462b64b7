package controller

import (
	"fmt"
	"slices"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// newNamespace gives each spec its own namespace.
func newNamespace() string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "pgpilot-test-"}}
	Expect(k8sClient.Create(ctx, ns)).To(Succeed())
	return ns.Name
}

func newCluster(namespace string, mutate ...func(*pgv1.PostgresCluster)) *pgv1.PostgresCluster {
	c := &pgv1.PostgresCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: namespace},
		Spec: pgv1.PostgresClusterSpec{
			Instances: 3,
			Storage:   pgv1.StorageSpec{Size: resource.MustParse("1Gi")},
		},
	}
	for _, m := range mutate {
		m(c)
	}
	return c
}

// createCluster creates the cluster and returns it as stored (defaults applied).
func createCluster(c *pgv1.PostgresCluster) *pgv1.PostgresCluster {
	Expect(k8sClient.Create(ctx, c)).To(Succeed())
	return c
}

// children lists every object pgpilot should own for cluster c, empty, keyed by name.
func children(c *pgv1.PostgresCluster) []client.Object {
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: c.Namespace} }
	objs := []client.Object{
		&corev1.ConfigMap{ObjectMeta: meta(pgbuilder.ConfigMapName(c))},
		&appsv1.StatefulSet{ObjectMeta: meta(pgbuilder.StatefulSetName(c))},
		&policyv1.PodDisruptionBudget{ObjectMeta: meta(pgbuilder.PodDisruptionBudgetName(c))},
	}
	for _, cred := range pgbuilder.GeneratedCredentials(c) {
		objs = append(objs, &corev1.Secret{ObjectMeta: meta(cred.SecretName)})
	}
	for _, name := range []string{pgbuilder.CASecretName(c), pgbuilder.TLSSecretName(c)} {
		objs = append(objs, &corev1.Secret{ObjectMeta: meta(name)})
	}
	for _, name := range []string{pgbuilder.HeadlessServiceName(c), pgbuilder.ReadWriteServiceName(c),
		pgbuilder.ReadOnlyServiceName(c), pgbuilder.AnyServiceName(c)} {
		objs = append(objs, &corev1.Service{ObjectMeta: meta(name)})
	}
	return objs
}

func get(obj client.Object) error {
	return k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj)
}

func fetch(c *pgv1.PostgresCluster) *pgv1.PostgresCluster {
	out := &pgv1.PostgresCluster{}
	Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(c), out)).To(Succeed())
	return out
}

// resourceVersions of the cluster and all its children, to prove nothing was written.
func resourceVersions(c *pgv1.PostgresCluster) map[string]string {
	out := map[string]string{}
	for _, obj := range append(children(c), &pgv1.PostgresCluster{ObjectMeta: c.ObjectMeta}) {
		Expect(get(obj)).To(Succeed())
		out[fmt.Sprintf("%T/%s", obj, obj.GetName())] = obj.GetResourceVersion()
	}
	return out
}

// eventReasons lists the reasons of the Events about cluster c.
func eventReasons(c *pgv1.PostgresCluster) []string {
	list := &eventsv1.EventList{}
	Expect(k8sClient.List(ctx, list, client.InNamespace(c.Namespace))).To(Succeed())
	var reasons []string
	for _, e := range list.Items {
		if e.Regarding.Name == c.Name && e.Regarding.Kind == "PostgresCluster" {
			reasons = append(reasons, e.Reason)
		}
	}
	slices.Sort(reasons)
	return reasons
}

// markPodReady does what a kubelet would: the pod runs and passes its readiness probe. Like a
// kubelet it retries on a conflict: the operator labels the pod meanwhile (CI run 20 saw one).
func markPodReady(namespace, name string) {
	pod := &corev1.Pod{}
	Eventually(func() error {
		return k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod)
	}).Should(Succeed())
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
			return err
		}
		now := metav1.Now()
		pod.Status.Phase = corev1.PodRunning
		pod.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
		return k8sClient.Status().Update(ctx, pod)
	})).To(Succeed())
}

// degradedReason is why the cluster is Degraded, "" when it is not.
func degradedReason(c *pgv1.PostgresCluster) string {
	if d := condition(fetch(c), pgv1.ConditionDegraded); d != nil && d.Status == metav1.ConditionTrue {
		return d.Reason
	}
	return ""
}

func condition(c *pgv1.PostgresCluster, conditionType string) *metav1.Condition {
	for i := range c.Status.Conditions {
		if c.Status.Conditions[i].Type == conditionType {
			return &c.Status.Conditions[i]
		}
	}
	return nil
}

// reconcileCount reads controller-runtime's reconcile counter for this controller.
func reconcileCount() float64 {
	families, err := metrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	total := 0.0
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "postgrescluster" {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// updateCluster changes the cluster's spec as a user would, retrying when pgpilot's status
// writes make the read stale.
func updateCluster(c *pgv1.PostgresCluster, mutate func(*pgv1.PostgresCluster)) *pgv1.PostgresCluster {
	var out *pgv1.PostgresCluster
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		out = fetch(c)
		mutate(out)
		return k8sClient.Update(ctx, out)
	})).To(Succeed())
	return out
}

// withTypes registers Kubernetes' and pgpilot's types in the shared scheme (the envtest suite
// does it in BeforeSuite) for unit tests that run without it.
func withTypes(t *testing.T) {
	t.Helper()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := pgv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
}
