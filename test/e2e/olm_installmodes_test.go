//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgversion "github.com/pgpilot/pgpilot-operator/internal/version"
)

// Every install mode the CSV claims: OLM installs the operator for the OperatorGroup's target
// namespaces (WATCH_NAMESPACE), and the operator reconciles clusters there and nothing else.
// OwnNamespace, SingleNamespace and MultiNamespace are installed side by side, three operators
// with disjoint targets as tenants of one Kubernetes cluster run them; AllNamespaces, whose
// targets meet every other group's, alone.
var _ = Describe("OLM install modes", Ordered, Label(olmLabel), func() {
	AfterEach(dumpOLMOnFailure)

	It("OwnNamespace, SingleNamespace and MultiNamespace side by side: each reconciles its targets only; the CSV claims every mode", func(ctx SpecContext) {
		installs := []*modeInstall{
			{mode: "OwnNamespace", pickTargets: func(own string, _ []string) []string { return []string{own} }},
			{mode: "SingleNamespace", pickTargets: func(_ string, others []string) []string { return others[:1] }},
			{mode: "MultiNamespace", pickTargets: func(_ string, others []string) []string { return others }},
		}
		installModes(ctx, installs...)
		supported := sets.New[operatorsv1alpha1.InstallModeType]()
		for _, m := range installs[0].csv.Spec.InstallModes {
			if m.Supported {
				supported.Insert(m.Type)
			}
		}
		Expect(sets.List(supported)).To(ConsistOf(operatorsv1alpha1.InstallModeTypeOwnNamespace,
			operatorsv1alpha1.InstallModeTypeSingleNamespace, operatorsv1alpha1.InstallModeTypeMultiNamespace,
			operatorsv1alpha1.InstallModeTypeAllNamespaces))
	})

	// One cluster shows it; the other namespaces have nothing outside to compare with.
	It("AllNamespaces: reconciles any namespace", func(ctx SpecContext) {
		installModes(ctx, &modeInstall{mode: "AllNamespaces",
			pickTargets:    func(string, []string) []string { return nil },
			pickReconciled: func(_ string, others []string) []string { return others[1:] }})
	})
})

// modeInstall is pgpilot installed by OLM in a namespace of its own (own) for the targets
// pickTargets chooses among own and two other namespaces (nil: AllNamespaces). A cluster in
// each namespace pickReconciled lists (default: the targets) must become Ready, one in every
// namespace outside the targets must stay untouched.
type modeInstall struct {
	mode                        string
	pickTargets, pickReconciled func(own string, others []string) []string

	own             string
	others, targets []string
	start           time.Time
	csv             *operatorsv1alpha1.ClusterServiceVersion
	inside          []*pgv1.PostgresCluster
}

// installModes subscribes every install at once, then checks each: its CSV, the targets OLM
// handed its operator, its clusters Ready, and (together, in one window) every cluster outside.
func installModes(ctx context.Context, installs ...*modeInstall) {
	owns := newOLMNamespaces(ctx, len(installs), "e2e-mode-op")
	for i, m := range installs {
		m.own = owns[i]
		m.others = []string{newNamespace(ctx, "e2e-mode-a"), newNamespace(ctx, "e2e-mode-b")}
		m.targets = m.pickTargets(m.own, m.others)
		m.start = time.Now()
		subscribe(ctx, m.own, m.targets, "", operatorsv1alpha1.ApprovalAutomatic)
	}
	for _, m := range installs {
		m.csv = waitForCSV(ctx, m.own, csvName(pgversion.Version))
		expectOperatorAvailable(ctx, m.own)
		AddReportEntry(m.mode+": Subscription to CSV Succeeded", time.Since(m.start).Round(time.Second).String())
		AddReportEntry(m.mode+": OLM's target namespaces", m.csv.Annotations["olm.targetNamespaces"])
		// OLM hands the operator its targets through the pod's olm.targetNamespaces annotation,
		// which the CSV's Deployment reads into WATCH_NAMESPACE.
		Expect(operatorPodAnnotation(ctx, m.own, "olm.targetNamespaces")).To(Equal(m.csv.Annotations["olm.targetNamespaces"]))
	}
	// Least privilege: the operator's identity reads Secrets where it works and nowhere else
	// (OLM turns the CSV's namespaced permissions into Roles in the targets; AllNamespaces
	// into a ClusterRole).
	unwatched := newNamespace(ctx, "e2e-mode-none")
	for _, m := range installs {
		for _, ns := range m.targets {
			Eventually(func() bool { return operatorMay(ctx, m.own, ns, "get", "secrets") }).
				Should(BeTrue(), "%s: the operator cannot read Secrets in its target %s", m.mode, ns)
		}
		Expect(operatorMay(ctx, m.own, unwatched, "get", "secrets")).To(Equal(m.targets == nil),
			"%s: the operator's Secret access in %s, a namespace it does not watch", m.mode, unwatched)
	}
	// The clusters outside first, so that by the time the watched ones are Ready, every operator
	// has had every chance to touch them. AllNamespaces leaves none outside.
	var outside []*pgv1.PostgresCluster
	for _, m := range installs {
		watched := sets.New(m.targets...)
		for _, ns := range append([]string{m.own}, m.others...) {
			if m.targets != nil && !watched.Has(ns) {
				c := smallCluster(ns, "outside")
				Expect(k8s.Create(ctx, c)).To(Succeed())
				outside = append(outside, c)
			}
		}
	}
	for _, m := range installs {
		reconciled := m.targets
		if m.pickReconciled != nil {
			reconciled = m.pickReconciled(m.own, m.others)
		}
		for _, ns := range reconciled {
			c := smallCluster(ns, "watched")
			Expect(k8s.Create(ctx, c)).To(Succeed())
			DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, c))).To(Succeed()) })
			m.inside = append(m.inside, c)
		}
	}
	for _, m := range installs {
		for _, c := range m.inside {
			waitForReady(ctx, c, 5*time.Minute)
			current := &pgv1.PostgresCluster{}
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), current)).To(Succeed())
			Expect(current.Status.OperatorVersion).To(Equal(pgversion.Version))
		}
		AddReportEntry(m.mode+": install to every watched cluster Ready", time.Since(m.start).Round(time.Second).String())
	}
	for _, c := range outside {
		By(fmt.Sprintf("%s/%s is outside every install's target namespaces and stays untouched", c.Namespace, c.Name))
	}
	if len(outside) > 0 {
		expectIgnored(ctx, outside...)
	}
}

// operatorMay asks the API server's authorizer whether the operator installed in own may do verb
// on resource in ns (a SubjectAccessReview for its ServiceAccount).
func operatorMay(ctx context.Context, own, ns, verb, resource string) bool {
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               "system:serviceaccount:" + own + ":" + operatorDeployment,
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + own, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: resource},
	}}
	Expect(k8s.Create(ctx, review)).To(Succeed())
	return review.Status.Allowed
}

// operatorPodAnnotation reads an annotation of the operator's pod in ns.
func operatorPodAnnotation(ctx context.Context, ns, key string) string {
	deploy := &appsv1.Deployment{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: operatorDeployment}, deploy)).To(Succeed())
	var pods corev1.PodList
	Expect(k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(deploy.Spec.Selector.MatchLabels))).To(Succeed())
	Expect(pods.Items).NotTo(BeEmpty(), "no operator pod in %s", ns)
	return pods.Items[0].Annotations[key]
}
