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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgversion "github.com/pgpilot/pgpilot-operator/internal/version"
)

// Every install mode the CSV claims: OLM installs the operator for the OperatorGroup's target
// namespaces (WATCH_NAMESPACE), and the operator reconciles clusters there and nothing else.
var _ = Describe("OLM install modes", Ordered, Label(olmLabel), func() {
	AfterEach(dumpOLMOnFailure)

	// installMode installs pgpilot in a namespace of its own for the targets pickTargets chooses
	// (nil: AllNamespaces), expects a cluster in each namespace `reconciled` lists to become Ready
	// and one in every namespace outside the targets to stay untouched.
	installMode := func(ctx context.Context, mode string, pickTargets func(own string, others []string) []string,
		reconciled func(own string, others []string) []string) *operatorsv1alpha1.ClusterServiceVersion {
		own := newOLMNamespace(ctx, "e2e-mode-op")
		others := []string{newNamespace(ctx, "e2e-mode-a"), newNamespace(ctx, "e2e-mode-b")}
		targets := pickTargets(own, others)
		start := time.Now()
		subscribe(ctx, own, targets, "", operatorsv1alpha1.ApprovalAutomatic)
		csv := waitForCSV(ctx, own, csvName(pgversion.Version))
		expectOperatorAvailable(ctx, own)
		AddReportEntry(mode+": Subscription to CSV Succeeded", time.Since(start).Round(time.Second).String())
		AddReportEntry(mode+": OLM's target namespaces", csv.Annotations["olm.targetNamespaces"])
		// OLM hands the operator its targets through the pod's olm.targetNamespaces annotation,
		// which the CSV's Deployment reads into WATCH_NAMESPACE.
		Expect(operatorPodAnnotation(ctx, own, "olm.targetNamespaces")).To(Equal(csv.Annotations["olm.targetNamespaces"]))

		watched := sets.New(targets...)
		var outside, inside []*pgv1.PostgresCluster
		// The namespaces outside first, so that by the time the watched ones are Ready, the
		// operator has had every chance to touch them. AllNamespaces leaves none outside.
		for _, ns := range append([]string{own}, others...) {
			if targets != nil && !watched.Has(ns) {
				c := smallCluster(ns, "outside")
				Expect(k8s.Create(ctx, c)).To(Succeed())
				outside = append(outside, c)
			}
		}
		for _, ns := range reconciled(own, others) {
			c := smallCluster(ns, "watched")
			Expect(k8s.Create(ctx, c)).To(Succeed())
			DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, c))).To(Succeed()) })
			inside = append(inside, c)
		}
		for _, c := range inside {
			waitForReady(ctx, c, 5*time.Minute)
			current := &pgv1.PostgresCluster{}
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), current)).To(Succeed())
			Expect(current.Status.OperatorVersion).To(Equal(pgversion.Version))
		}
		AddReportEntry(mode+": install to every watched cluster Ready", time.Since(start).Round(time.Second).String())
		for _, c := range outside {
			By(fmt.Sprintf("%s/%s is outside the target namespaces and stays untouched", c.Namespace, c.Name))
		}
		if len(outside) > 0 {
			expectIgnored(ctx, outside...)
		}
		return csv
	}

	It("OwnNamespace: reconciles the operator's namespace only; the CSV claims every mode", func(ctx SpecContext) {
		csv := installMode(ctx, "OwnNamespace",
			func(own string, _ []string) []string { return []string{own} },
			func(own string, _ []string) []string { return []string{own} })
		supported := sets.New[operatorsv1alpha1.InstallModeType]()
		for _, m := range csv.Spec.InstallModes {
			if m.Supported {
				supported.Insert(m.Type)
			}
		}
		Expect(sets.List(supported)).To(ConsistOf(operatorsv1alpha1.InstallModeTypeOwnNamespace,
			operatorsv1alpha1.InstallModeTypeSingleNamespace, operatorsv1alpha1.InstallModeTypeMultiNamespace,
			operatorsv1alpha1.InstallModeTypeAllNamespaces))
	})

	It("SingleNamespace: reconciles one other namespace only", func(ctx SpecContext) {
		installMode(ctx, "SingleNamespace",
			func(_ string, others []string) []string { return others[:1] },
			func(_ string, others []string) []string { return others[:1] })
	})

	It("MultiNamespace: reconciles the listed namespaces only", func(ctx SpecContext) {
		installMode(ctx, "MultiNamespace",
			func(_ string, others []string) []string { return others },
			func(_ string, others []string) []string { return others })
	})

	// One cluster shows it; the other namespaces have nothing outside to compare with.
	It("AllNamespaces: reconciles any namespace", func(ctx SpecContext) {
		installMode(ctx, "AllNamespaces",
			func(string, []string) []string { return nil },
			func(_ string, others []string) []string { return others[1:] })
	})
})

// operatorPodAnnotation reads an annotation of the operator's pod in ns.
func operatorPodAnnotation(ctx context.Context, ns, key string) string {
	deploy := &appsv1.Deployment{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: operatorDeployment}, deploy)).To(Succeed())
	var pods corev1.PodList
	Expect(k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(deploy.Spec.Selector.MatchLabels))).To(Succeed())
	Expect(pods.Items).NotTo(BeEmpty(), "no operator pod in %s", ns)
	return pods.Items[0].Annotations[key]
}
