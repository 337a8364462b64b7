//go:build e2e

package e2e

import (
	"fmt"
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The operator's pod specs are Serial: a failover spec kills the operator, and they would see
// its replacement starting.
var _ = Describe("The operator deployment", Serial, func() {
	AfterEach(dumpOnFailure)

	It("becomes Available with leader election on, its pod holding the Lease", func(ctx SpecContext) {
		deploy := &appsv1.Deployment{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: operatorDeployment}, deploy)).To(Succeed())
			g.Expect(deploy.Status.Conditions).To(ContainElement(And(
				HaveField("Type", appsv1.DeploymentAvailable), HaveField("Status", corev1.ConditionTrue))))
		}).Should(Succeed())
		Expect(hasFlag(deploy.Spec.Template.Spec.Containers[0].Args, "--leader-elect")).To(BeTrue(),
			"the manager runs without --leader-elect")

		pods := &corev1.PodList{}
		Expect(k8s.List(ctx, pods, client.InNamespace(operatorNamespace),
			client.MatchingLabels(deploy.Spec.Selector.MatchLabels))).To(Succeed())
		running := slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return !podReady(&p) })
		Expect(running).To(HaveLen(1))

		// controller-runtime's holder identity is "<pod name>_<uuid>".
		Eventually(func(g Gomega) {
			leases := &coordinationv1.LeaseList{}
			g.Expect(k8s.List(ctx, leases, client.InNamespace(operatorNamespace))).To(Succeed())
			var holders []string
			for _, l := range leases.Items {
				holders = append(holders, ptr.Deref(l.Spec.HolderIdentity, ""))
			}
			g.Expect(holders).To(ContainElement(HavePrefix(running[0].Name + "_")))
		}).Should(Succeed())
	})
})

// Serial, as the deployment's: it scrapes the operator's pod.
var _ = Describe("The metrics endpoint, scraped from inside the cluster", Ordered, Serial, func() {
	var ns, url string

	BeforeAll(func(ctx SpecContext) {
		ns = newNamespace(ctx, "e2e-metrics")
		services := &corev1.ServiceList{}
		Expect(k8s.List(ctx, services, client.InNamespace(operatorNamespace),
			client.MatchingLabels{"control-plane": "controller-manager"})).To(Succeed())
		Expect(services.Items).To(HaveLen(1), "one metrics Service in %s", operatorNamespace)
		svc := services.Items[0]
		url = fmt.Sprintf("https://%s.%s.svc:%d/metrics", svc.Name, svc.Namespace, svc.Spec.Ports[0].Port)

		// "scraper" may read metrics, as Prometheus' ServiceAccount would; "stranger" may not.
		for _, name := range []string{"scraper", "stranger"} {
			Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}})).To(Succeed())
		}
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: ns + "-scraper"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: metricsReaderRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scraper", Namespace: ns}},
		}
		Expect(k8s.Create(ctx, binding)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, binding))).To(Succeed()) })
	})
	AfterEach(dumpOnFailure)

	scrape := func(ctx SpecContext, job, serviceAccount string, mountToken bool, expect int) {
		args := []string{"-url", url, "-expect", fmt.Sprint(expect)}
		if mountToken {
			args = append(args, "-token-file", "/var/run/secrets/kubernetes.io/serviceaccount/token")
		}
		logs := runJob(ctx, ns, job, corev1.PodSpec{
			ServiceAccountName:           serviceAccount,
			AutomountServiceAccountToken: ptr.To(mountToken),
			Containers: []corev1.Container{restrictedContainer(corev1.Container{
				Name: "httpcheck", Image: httpcheckImage, Args: args,
			})},
		})
		Expect(logs).To(ContainSubstring(fmt.Sprintf("(expected %d)", expect)))
	}

	It("answers 200 to a ServiceAccount bound to the metrics-reader role", func(ctx SpecContext) {
		scrape(ctx, "scrape-authorized", "scraper", true, 200)
	})
	It("answers 403 to a ServiceAccount without the role", func(ctx SpecContext) {
		scrape(ctx, "scrape-forbidden", "stranger", true, 403)
	})
	It("answers 401 without a token", func(ctx SpecContext) {
		scrape(ctx, "scrape-anonymous", "stranger", false, 401)
	})
})

// hasFlag reports whether a container's args turn a boolean flag on.
func hasFlag(args []string, flag string) bool {
	return slices.ContainsFunc(args, func(a string) bool { return a == flag || a == flag+"=true" })
}
