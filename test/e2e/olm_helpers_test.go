//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	operatorsv1 "github.com/operator-framework/api/pkg/operators/v1"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// The OLM specs (label "olm") run after the others, once the kustomize-deployed operator is gone
// and `localcluster olm` has installed OLM with pgpilot's catalog image in this CatalogSource.
const (
	olmLabel      = "olm"
	olmNamespace  = "olm"
	catalogSource = "pgpilot-operators"
	packageName   = "pgpilot-operator"
)

// The catalog's earlier releases, which the specs upgrade from: 0.1.0 ran PostgreSQL without
// the instance agent; 0.2.0 is the release before this version.
const (
	releaseWithoutAgent = "0.1.0"
	previousRelease     = "0.2.0"
)

func csvName(version string) string { return packageName + ".v" + version }

// olmTools are what test/e2e/run.sh hands the OLM specs.
type olmTools struct {
	sdkBinary  string // the operator-sdk binary
	busybox    string // an image with sh and tar (scorecard's untar and storage, run bundle's gunzip)
	registry   string // the in-namespace registry's address, as operator-sdk on the node reaches it
	registryCA string // the CA file of the registry's certificate
	index      string // an empty file-based catalog image for run bundle to add bundles to
}

func requireOLMTools() olmTools {
	t := olmTools{sdkBinary: os.Getenv("E2E_OPERATOR_SDK"), busybox: os.Getenv("E2E_BUSYBOX_IMAGE"),
		registry: os.Getenv("E2E_REGISTRY"), registryCA: os.Getenv("E2E_REGISTRY_CA"), index: os.Getenv("E2E_INDEX_IMAGE")}
	Expect(t.sdkBinary).NotTo(BeEmpty(), "E2E_OPERATOR_SDK is unset: run the suite with `make test-e2e`")
	Expect(t.busybox).NotTo(BeEmpty(), "E2E_BUSYBOX_IMAGE is unset: run the suite with `make test-e2e`")
	Expect(t.registry).NotTo(BeEmpty(), "E2E_REGISTRY is unset: run the suite with `make test-e2e`")
	Expect(t.registryCA).To(BeAnExistingFile(), "E2E_REGISTRY_CA: run the suite with `make test-e2e`")
	Expect(t.index).NotTo(BeEmpty(), "E2E_INDEX_IMAGE is unset: run the suite with `make test-e2e`")
	return t
}

// operatorSDK runs operator-sdk with OLM's trap removed: CI in the environment makes OLM's
// client code (linked into operator-sdk) check labels on every request.
func (t olmTools) operatorSDK(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, t.sdkBinary, args...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "CI=") })
	// The registry's certificate is from the cluster's CA.
	cmd.Env = append(cmd.Env, "SSL_CERT_FILE="+t.registryCA)
	out, err := cmd.CombinedOutput()
	shown := out
	if len(shown) > 4096 { // scorecard's JSON carries whole CRDs
		shown = append(shown[:4096:4096], "\n[... cut]"...)
	}
	GinkgoWriter.Printf("$ operator-sdk %s\n%s\n", strings.Join(args, " "), shown)
	return string(out), err
}

// newOLMNamespace is newNamespace for OLM specs: its cleanup also waits until the namespace and
// every pgpilot CSV OLM copied from it are gone, so that the next install starts clean.
func newOLMNamespace(ctx context.Context, prefix string) string {
	return newOLMNamespaces(ctx, 1, prefix)[0]
}

// newOLMNamespaces is newOLMNamespace for n installs side by side: the cleanup deletes every
// namespace before it waits, since no pgpilot CSV is gone until all of them are.
func newOLMNamespaces(ctx context.Context, n int, prefix string) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = newNamespace(ctx, prefix)
	}
	// Cleanups run last-in first-out: this one deletes the namespaces themselves before waiting.
	DeferCleanup(func(ctx SpecContext) {
		for _, name := range names {
			ns := &corev1.Namespace{}
			ns.Name = name
			Expect(client.IgnoreNotFound(k8s.Delete(ctx, ns))).To(Succeed())
		}
		Eventually(func(g Gomega) {
			for _, name := range names {
				err := k8s.Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "namespace %s still exists (%v)", name, err)
			}
			var csvs operatorsv1alpha1.ClusterServiceVersionList
			g.Expect(k8s.List(ctx, &csvs)).To(Succeed())
			for _, csv := range csvs.Items {
				g.Expect(csv.Name).NotTo(HavePrefix(packageName), "CSV %s/%s remains", csv.Namespace, csv.Name)
			}
		}).WithTimeout(3 * time.Minute).Should(Succeed())
	})
	return names
}

// subscribe asks OLM for pgpilot in ns from the catalog's stable channel: an OperatorGroup for
// targets (none: AllNamespaces) and a Subscription, from startingCSV when given.
func subscribe(ctx context.Context, ns string, targets []string, startingCSV string, approval operatorsv1alpha1.Approval) {
	group := &operatorsv1.OperatorGroup{}
	group.Name, group.Namespace = "pgpilot", ns
	group.Spec.TargetNamespaces = targets
	Expect(k8s.Create(ctx, group)).To(Succeed())
	sub := &operatorsv1alpha1.Subscription{Spec: &operatorsv1alpha1.SubscriptionSpec{
		CatalogSource: catalogSource, CatalogSourceNamespace: olmNamespace, Package: packageName,
		Channel: "stable", StartingCSV: startingCSV, InstallPlanApproval: approval,
	}}
	sub.Name, sub.Namespace = packageName, ns
	Expect(k8s.Create(ctx, sub)).To(Succeed())
}

// approveInstallPlan approves the InstallPlan that installs csv in ns once OLM has made it, and
// returns its name.
func approveInstallPlan(ctx context.Context, ns, csv string) string {
	var name string
	Eventually(func(g Gomega) {
		var plans operatorsv1alpha1.InstallPlanList
		g.Expect(k8s.List(ctx, &plans, client.InNamespace(ns))).To(Succeed())
		i := slices.IndexFunc(plans.Items, func(p operatorsv1alpha1.InstallPlan) bool {
			return slices.Contains(p.Spec.ClusterServiceVersionNames, csv)
		})
		g.Expect(i).NotTo(Equal(-1), "no InstallPlan for %s yet", csv)
		plan := &plans.Items[i]
		g.Expect(plan.Status.Phase).To(Equal(operatorsv1alpha1.InstallPlanPhaseRequiresApproval))
		plan.Spec.Approved = true
		g.Expect(k8s.Update(ctx, plan)).To(Succeed())
		name = plan.Name
	}).WithTimeout(2 * time.Minute).Should(Succeed())
	return name
}

// waitForCSV waits until OLM reports csv in ns Succeeded, and returns it.
func waitForCSV(ctx context.Context, ns, name string) *operatorsv1alpha1.ClusterServiceVersion {
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, csv)).To(Succeed())
		g.Expect(csv.Status.Phase).To(Equal(operatorsv1alpha1.CSVPhaseSucceeded),
			"CSV %s: %s %s", name, csv.Status.Reason, csv.Status.Message)
	}).WithTimeout(5 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
	return csv
}

// expectOperatorAvailable checks the operator Deployment OLM made from the CSV.
func expectOperatorAvailable(ctx context.Context, ns string) {
	deploy := &appsv1.Deployment{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: operatorDeployment}, deploy)).To(Succeed())
	Expect(deploy.Status.AvailableReplicas).To(BeNumerically(">=", 1), "operator Deployment not Available")
}

// installPlanCSVs are the CSVs the InstallPlans of ns installed or would install.
func installPlanCSVs(ctx context.Context, ns string) []string {
	var plans operatorsv1alpha1.InstallPlanList
	Expect(k8s.List(ctx, &plans, client.InNamespace(ns))).To(Succeed())
	var names []string
	for _, p := range plans.Items {
		names = append(names, p.Spec.ClusterServiceVersionNames...)
	}
	return names
}

// installPlanSummary describes the InstallPlans of ns: name, phase, the CSVs, the steps' status.
func installPlanSummary(ctx context.Context, ns string) string {
	var plans operatorsv1alpha1.InstallPlanList
	Expect(k8s.List(ctx, &plans, client.InNamespace(ns))).To(Succeed())
	var lines []string
	for _, p := range plans.Items {
		steps := map[operatorsv1alpha1.StepStatus]int{}
		for _, s := range p.Status.Plan {
			steps[s.Status]++
		}
		lines = append(lines, fmt.Sprintf("%s %s %v approval=%s steps=%v bundleLookups=%d",
			p.Name, p.Status.Phase, p.Spec.ClusterServiceVersionNames, p.Spec.Approval, steps, len(p.Status.BundleLookups)))
	}
	return strings.Join(lines, "\n")
}

// smallCluster is a one-instance PostgresCluster that takes its volume along when deleted. It
// sets only fields every pgpilot release knows.
func smallCluster(ns, name string) *pgv1.PostgresCluster {
	c := &pgv1.PostgresCluster{}
	c.Name, c.Namespace = name, ns
	c.Spec.Instances = 1
	c.Spec.Storage.Size = resource.MustParse("1Gi")
	c.Spec.Storage.ReclaimPolicy = pgv1.PVCReclaimDelete
	return c
}

// expectIgnored: nothing reconciled any of clusters (no status, no StatefulSet), for a while.
func expectIgnored(ctx context.Context, clusters ...*pgv1.PostgresCluster) {
	Consistently(func(g Gomega) {
		for _, c := range clusters {
			current := &pgv1.PostgresCluster{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), current)).To(Succeed())
			g.Expect(current.Status.ObservedGeneration).To(BeZero(), "%s/%s has a status", c.Namespace, c.Name)
			err := k8s.Get(ctx, client.ObjectKeyFromObject(c), &appsv1.StatefulSet{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s/%s has a StatefulSet", c.Namespace, c.Name)
		}
	}).WithTimeout(10 * time.Second).WithPolling(2 * time.Second).Should(Succeed())
}

// dumpOLMOnFailure records what OLM said when an OLM spec failed: every CSV and Subscription,
// and the end of the logs of the pgpilot operators OLM runs and of the olm and catalog operators.
func dumpOLMOnFailure(ctx context.Context) {
	if !CurrentSpecReport().Failed() {
		return
	}
	var lines []string
	var csvs operatorsv1alpha1.ClusterServiceVersionList
	if k8s.List(ctx, &csvs) == nil {
		for _, c := range csvs.Items {
			lines = append(lines, fmt.Sprintf("CSV %s/%s %s %s: %s", c.Namespace, c.Name, c.Status.Phase, c.Status.Reason, c.Status.Message))
			if strings.HasPrefix(c.Name, packageName) && c.Status.Reason != operatorsv1alpha1.CSVReasonCopied {
				AddReportEntry("operator log in "+c.Namespace, deploymentLogTail(ctx, c.Namespace, operatorDeployment, 60))
			}
		}
	}
	var subs operatorsv1alpha1.SubscriptionList
	if k8s.List(ctx, &subs) == nil {
		for _, s := range subs.Items {
			lines = append(lines, fmt.Sprintf("Subscription %s/%s state=%s current=%s installed=%s",
				s.Namespace, s.Name, s.Status.State, s.Status.CurrentCSV, s.Status.InstalledCSV))
		}
	}
	AddReportEntry("OLM objects", strings.Join(lines, "\n"))
	for _, deploy := range []string{"olm-operator", "catalog-operator"} {
		AddReportEntry(deploy+" log", deploymentLogTail(ctx, olmNamespace, deploy, 60))
	}
}
