//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgversion "github.com/pgpilot/pgpilot-operator/internal/version"
)

// operator-sdk's OLM commands, as a developer runs them against a cluster with OLM: a bundle
// image straight from the registry, its upgrade, and the cleanup.
var _ = Describe("operator-sdk run bundle", Ordered, Label(olmLabel), func() {
	var tools olmTools
	var ns string
	bundle := func(version string) string {
		return tools.registry + "/pgpilot/pgpilot-operator-bundle:v" + version
	}

	BeforeAll(func(ctx SpecContext) {
		tools = requireOLMTools()
		ns = newOLMNamespace(ctx, "e2e-run-bundle")
	})
	AfterEach(dumpOLMOnFailure)

	It("installs the "+previousRelease+" bundle image", func(ctx SpecContext) {
		start := time.Now()
		out, err := tools.operatorSDK(ctx, "run", "bundle", bundle(previousRelease), "--namespace", ns,
			"--index-image", tools.index, "--decompression-image", tools.busybox, "--timeout", "5m")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring(`OLM has successfully installed \"pgpilot-operator.v` + previousRelease + `\"`))
		waitForCSV(ctx, ns, csvName(previousRelease))
		expectOperatorAvailable(ctx, ns)
		AddReportEntry("operator-sdk run bundle ("+previousRelease+")", time.Since(start).Round(time.Second).String())
		AddReportEntry("OLM after run bundle", installPlanSummary(ctx, ns))
	})

	It("upgrades to this version's bundle image with run bundle-upgrade", func(ctx SpecContext) {
		start := time.Now()
		out, err := tools.operatorSDK(ctx, "run", "bundle-upgrade", bundle(pgversion.Version), "--namespace", ns,
			"--timeout", "5m")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring(`Successfully upgraded to \"pgpilot-operator.v` + pgversion.Version + `\"`))
		waitForCSV(ctx, ns, csvName(pgversion.Version))
		expectOperatorAvailable(ctx, ns)
		Eventually(func() bool {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: csvName(previousRelease)}, &operatorsv1alpha1.ClusterServiceVersion{})
			return apierrors.IsNotFound(err)
		}).Should(BeTrue(), "the "+previousRelease+" CSV was not replaced")
		AddReportEntry("operator-sdk run bundle-upgrade (to "+pgversion.Version+")", time.Since(start).Round(time.Second).String())
	})

	It("removes everything it installed with cleanup", func(ctx SpecContext) {
		out, err := tools.operatorSDK(ctx, "cleanup", packageName, "--namespace", ns, "--timeout", "3m")
		Expect(err).NotTo(HaveOccurred(), out)
		var csvs operatorsv1alpha1.ClusterServiceVersionList
		Expect(k8s.List(ctx, &csvs, client.InNamespace(ns))).To(Succeed())
		Expect(csvs.Items).To(BeEmpty())
		var subs operatorsv1alpha1.SubscriptionList
		Expect(k8s.List(ctx, &subs, client.InNamespace(ns))).To(Succeed())
		Expect(subs.Items).To(BeEmpty())
		var sources operatorsv1alpha1.CatalogSourceList
		Expect(k8s.List(ctx, &sources, client.InNamespace(ns))).To(Succeed())
		Expect(sources.Items).To(BeEmpty())
	})
})

// Scorecard in the cluster: every test of bundle/tests/scorecard/config.yaml runs in a pod, from
// operator-sdk's scorecard-test image and pgpilot's own, against this version installed by OLM.
var _ = Describe("operator-sdk scorecard", Ordered, Label(olmLabel), func() {
	var tools olmTools
	var ns string

	BeforeAll(func(ctx SpecContext) {
		tools = requireOLMTools()
		ns = newOLMNamespace(ctx, "e2e-scorecard")
		subscribe(ctx, ns, []string{ns}, "", operatorsv1alpha1.ApprovalAutomatic)
		waitForCSV(ctx, ns, csvName(pgversion.Version))
		// pgpilot's alm-examples test dry-runs a create of each example, as this account.
		sa := &corev1.ServiceAccount{}
		sa.Name, sa.Namespace = "scorecard", ns
		Expect(k8s.Create(ctx, sa)).To(Succeed())
		for _, kind := range []string{"postgrescluster", "backup", "scheduledbackup", "database"} {
			binding := &rbacv1.RoleBinding{
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "pgpilot-operator-" + kind + "-editor-role"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: ns}},
			}
			binding.Name, binding.Namespace = "scorecard-"+kind, ns
			Expect(k8s.Create(ctx, binding)).To(Succeed())
		}
		// The examples name the S3 Secrets; the pgpilot-secret-references admission policy lets
		// only someone who may read a Secret name it, so the account gets that and no more.
		readSecrets := &rbacv1.Role{Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"},
			Verbs: []string{"get"}, ResourceNames: []string{"s3-credentials", "s3-ca"}}}}
		readSecrets.Name, readSecrets.Namespace = "scorecard-example-secrets", ns
		Expect(k8s.Create(ctx, readSecrets)).To(Succeed())
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: readSecrets.Name, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: readSecrets.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: ns}},
		})).To(Succeed())
	})
	AfterEach(dumpOLMOnFailure)

	It("passes every test", func(ctx SpecContext) {
		start := time.Now()
		out, err := tools.operatorSDK(ctx, "scorecard", filepath.Join("..", "..", "bundle"), "--namespace", ns,
			"--service-account", "scorecard", "--storage-image", tools.busybox, "--untar-image", tools.busybox,
			"--wait-time", "180s", "--output", "json")
		Expect(err).NotTo(HaveOccurred(), out)
		AddReportEntry("operator-sdk scorecard in the cluster", time.Since(start).Round(time.Second).String())

		var list scapiv1alpha3.TestList
		Expect(json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &list)).To(Succeed(), out)
		var summary []string
		for _, test := range list.Items {
			Expect(test.Status.Results).NotTo(BeEmpty(), "test %v reported nothing", test.Spec.Image)
			for _, r := range test.Status.Results {
				summary = append(summary, fmt.Sprintf("%s: %s", r.Name, r.State))
				Expect(r.State).To(Equal(scapiv1alpha3.PassState), "%s: %s %v", r.Name, r.Log, r.Errors)
			}
		}
		// The nine tests of bundle/tests/scorecard/config.yaml: six built in, three pgpilot's.
		Expect(summary).To(HaveLen(9), strings.Join(summary, "\n"))
		AddReportEntry("scorecard results", strings.Join(summary, "\n"))
	})
})
