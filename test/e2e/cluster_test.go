//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

var _ = Describe("The sample PostgresCluster", Ordered, SpecPriority(longestSpecs), func() {
	var cluster *pgv1.PostgresCluster
	var volumes []string

	BeforeAll(func(ctx SpecContext) {
		cluster = loadSample(newNamespace(ctx, "e2e-sample"))
		Expect(cluster.Spec.Storage.ReclaimPolicy).To(Equal(pgv1.PVCReclaimRetain),
			"these specs expect the sample to keep its volume claims")
		Expect(k8s.Create(ctx, cluster)).To(Succeed())
	})
	AfterEach(dumpOnFailure)

	It("becomes Ready with every instance Running and its volume claim Bound", func(ctx SpecContext) {
		waitForReady(ctx, cluster, 6*time.Minute)
		pods := clusterPods(ctx, cluster)
		Expect(pods).To(HaveLen(int(cluster.Spec.Instances)))
		for i := range pods {
			Expect(pods[i].Status.Phase).To(Equal(corev1.PodRunning), "pod %s", pods[i].Name)
			Expect(podReady(&pods[i])).To(BeTrue(), "pod %s is not Ready", pods[i].Name)
		}
		volumes = boundVolumes(ctx, cluster)
		Expect(volumes).To(HaveLen(int(cluster.Spec.Instances)))
		expectPgpilotImage(ctx, cluster, defaultMajor) // a cluster naming no version
	})

	It("answers SQL through its read-write Service", func(ctx SpecContext) {
		logs, ok := psql(ctx, cluster, "psql", cluster.Name+"-rw", cluster.Name+"-superuser", "postgres",
			"select 'answer from ' || current_setting('cluster_name')")
		Expect(ok).To(BeTrue(), "psql failed:\n%s", logs)
		Expect(logs).To(ContainSubstring("answer from " + cluster.Name))
	})

	It("applies a re-created superuser Secret's new password without a restart", func(ctx SpecContext) {
		restarts := restartCounts(ctx, cluster)
		secret := &corev1.Secret{}
		key := client.ObjectKey{Namespace: cluster.Namespace, Name: cluster.Name + "-superuser"}
		Expect(k8s.Get(ctx, key, secret)).To(Succeed())
		old := string(secret.Data[corev1.BasicAuthPasswordKey])
		Expect(k8s.Delete(ctx, secret)).To(Succeed())
		start := time.Now()
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, key, secret)).To(Succeed())
			g.Expect(string(secret.Data[corev1.BasicAuthPasswordKey])).NotTo(BeEmpty())
			g.Expect(string(secret.Data[corev1.BasicAuthPasswordKey])).NotTo(Equal(old))
		}).WithTimeout(operatorReacts).Should(Succeed())

		attempt := 0
		Eventually(func() bool {
			attempt++
			_, ok := psql(ctx, cluster, fmt.Sprintf("psql-rotated-%d", attempt), cluster.Name+"-rw", cluster.Name+"-superuser",
				"postgres", "select 1")
			return ok
		}).WithTimeout(2*time.Minute).WithPolling(time.Second).Should(BeTrue(),
			"the new password from the re-created Secret does not let psql in")
		GinkgoWriter.Printf("new superuser password accepted %.1fs after the Secret was deleted (%d attempts)\n",
			time.Since(start).Seconds(), attempt)
		Expect(restartCounts(ctx, cluster)).To(Equal(restarts), "no instance may restart for a new password")
	})

	It("keeps declared roles on the primary: logging in over TLS, rotated and repaired without a restart", func(ctx SpecContext) {
		expectManagedRoles(ctx, cluster, cluster.Name+"-superuser")
	})

	It("keeps a Database with its schema and trusted extension, reports what the image lacks, and drops it only when asked", func(ctx SpecContext) {
		expectManagedDatabases(ctx, cluster, cluster.Name+"-superuser")
	})

	It("keeps its volume claims when deleted (reclaimPolicy Retain)", func(ctx SpecContext) {
		Expect(k8s.Delete(ctx, cluster)).To(Succeed())
		waitForGone(ctx, cluster)
		Consistently(func() int { return len(clusterClaims(ctx, cluster)) }).
			WithTimeout(5 * time.Second).Should(Equal(int(cluster.Spec.Instances)))

		By("deleting the kept claims, the provisioner removes their volumes")
		for _, pvc := range clusterClaims(ctx, cluster) {
			Expect(k8s.Delete(ctx, &pvc)).To(Succeed())
		}
		waitForVolumesGone(ctx, volumes)
	})
})

var _ = Describe("A PostgresCluster with reclaimPolicy Delete", func() {
	AfterEach(dumpOnFailure)

	It("takes its volume claims and volumes along when deleted", func(ctx SpecContext) {
		cluster := loadSample(newNamespace(ctx, "e2e-delete"))
		cluster.Name = "ephemeral"
		cluster.Spec.Instances = 1
		cluster.Spec.Storage.ReclaimPolicy = pgv1.PVCReclaimDelete
		Expect(k8s.Create(ctx, cluster)).To(Succeed())
		waitForReady(ctx, cluster, 4*time.Minute)
		volumes := boundVolumes(ctx, cluster)
		Expect(volumes).To(HaveLen(1))

		Expect(k8s.Delete(ctx, cluster)).To(Succeed())
		waitForGone(ctx, cluster)
		Eventually(func() []corev1.PersistentVolumeClaim { return clusterClaims(ctx, cluster) }).Should(BeEmpty())
		waitForVolumesGone(ctx, volumes)
	})
})

var _ = Describe("A PostgresCluster whose storage class does not exist", func() {
	AfterEach(dumpOnFailure)

	It("says so in its Degraded condition instead of waiting silently", func(ctx SpecContext) {
		cluster := loadSample(newNamespace(ctx, "e2e-noclass"))
		cluster.Name = "noclass"
		cluster.Spec.Instances = 1
		cluster.Spec.Storage.StorageClassName = ptr.To("no-such-class")
		cluster.Spec.Storage.ReclaimPolicy = pgv1.PVCReclaimDelete
		Expect(k8s.Create(ctx, cluster)).To(Succeed())
		Eventually(func(g Gomega) {
			current := &pgv1.PostgresCluster{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster), current)).To(Succeed())
			degraded := meta.FindStatusCondition(current.Status.Conditions, pgv1.ConditionDegraded)
			g.Expect(degraded).NotTo(BeNil())
			g.Expect(degraded.Reason).To(Equal("InstancesUnschedulable"))
			g.Expect(degraded.Message).To(ContainSubstring("noclass-0"))
			GinkgoWriter.Printf("Degraded: %s\n", degraded.Message)
		}).WithTimeout(operatorReacts).WithPolling(time.Second).Should(Succeed())
		Expect(k8s.Delete(ctx, cluster)).To(Succeed())
		waitForGone(ctx, cluster)
	})
})

func waitForReady(ctx context.Context, cluster *pgv1.PostgresCluster, timeout time.Duration) {
	Eventually(func(g Gomega) {
		current := &pgv1.PostgresCluster{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster), current)).To(Succeed())
		g.Expect(current.Status.Phase).To(Equal(pgv1.PhaseReady))
	}).WithTimeout(timeout).WithPolling(2 * time.Second).Should(Succeed())
}

// boundVolumes checks that every claim of the cluster is Bound to a volume of the default
// StorageClass and returns the volumes' names.
func boundVolumes(ctx context.Context, cluster *pgv1.PostgresCluster) []string {
	var classes storageClassList
	Expect(k8s.List(ctx, &classes.StorageClassList)).To(Succeed())
	var names []string
	for _, pvc := range clusterClaims(ctx, cluster) {
		Expect(pvc.Status.Phase).To(Equal(corev1.ClaimBound), "claim %s", pvc.Name)
		pv := &corev1.PersistentVolume{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, pv)).To(Succeed())
		Expect(pv.Spec.StorageClassName).To(Equal(classes.defaultName()))
		Expect(pv.Spec.ClaimRef.Name).To(Equal(pvc.Name))
		names = append(names, pv.Name)
	}
	return names
}

// waitForGone waits for the cluster, its StatefulSet and its pods to be deleted.
func waitForGone(ctx context.Context, cluster *pgv1.PostgresCluster) {
	Eventually(func(g Gomega) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(cluster), &pgv1.PostgresCluster{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "cluster still there (%v)", err)
		err = k8s.Get(ctx, client.ObjectKeyFromObject(cluster), &appsv1.StatefulSet{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "StatefulSet still there (%v)", err)
		g.Expect(clusterPods(ctx, cluster)).To(BeEmpty())
	}).Should(Succeed())
}

func waitForVolumesGone(ctx context.Context, names []string) {
	for _, name := range names {
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Name: name}, &corev1.PersistentVolume{}))
		}).Should(BeTrue(), "volume %s was not deleted", name)
	}
}

// restartCounts are the instance pods' container restarts, by pod.
func restartCounts(ctx context.Context, cluster *pgv1.PostgresCluster) map[string]int32 {
	counts := map[string]int32{}
	for _, pod := range clusterPods(ctx, cluster) {
		for _, c := range pod.Status.ContainerStatuses {
			counts[pod.Name] += c.RestartCount
		}
	}
	return counts
}
