//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	"github.com/pgpilot/pgpilot-operator/internal/plugin"
)

// kubectlPgpilot runs `kubectl pgpilot ARGS` in namespace the way a user does: kubectl finds
// the plugin on PATH (run.sh builds it into E2E_PLUGIN_DIR). It returns the combined output.
func kubectlPgpilot(ctx context.Context, namespace string, args ...string) (string, error) {
	dir := os.Getenv("E2E_PLUGIN_DIR")
	Expect(dir).NotTo(BeEmpty(), "E2E_PLUGIN_DIR names the directory of kubectl-pgpilot (test/e2e/run.sh sets it)")
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"pgpilot", "--namespace=" + namespace}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	GinkgoWriter.Printf("kubectl pgpilot %s:\n%s\n", strings.Join(args, " "), out)
	return string(out), err
}

// pluginSpecs are the kubectl plugin's specs, run on the Ready 3-instance cluster of the
// streaming replication specs (no cluster of their own to bring up).
func pluginSpecs(clusterOf func() *pgv1.PostgresCluster) {
	It("shows the cluster with kubectl pgpilot status, answers psql as the application user, and refuses what does not exist in one line", func(ctx SpecContext) {
		cluster := clusterOf()
		out, err := kubectlPgpilot(ctx, cluster.Namespace, "status", cluster.Name, "-o", "json")
		Expect(err).NotTo(HaveOccurred())
		var view plugin.ClusterView
		Expect(json.Unmarshal([]byte(out), &view)).To(Succeed())
		current := &pgv1.PostgresCluster{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster), current)).To(Succeed())
		Expect(view.Primary).To(Equal(current.Status.CurrentPrimary))
		Expect(view.Members).To(HaveLen(int(current.Spec.Instances)))
		synchronous := 0
		for _, m := range view.Members {
			if m.Name != view.Primary {
				Expect(m.Role).To(Equal("replica"), "%s", m.Name)
				Expect(m.Streaming).To(BeTrue(), "replica %s", m.Name)
				Expect(m.SyncState).To(BeElementOf("sync", "quorum", "potential", "async"), "replica %s", m.Name)
				if m.SyncState == "sync" || m.SyncState == "quorum" {
					synchronous++
				}
			}
		}
		Expect(view.Synchronous).NotTo(BeEmpty(), "the cluster is synchronous")
		Expect(synchronous).To(BeNumerically(">=", 1), "no replica confirms commits of this synchronous cluster")
		text, err := kubectlPgpilot(ctx, cluster.Namespace, "status", cluster.Name)
		Expect(err).NotTo(HaveOccurred())
		Expect(text).To(ContainSubstring("Primary:      " + view.Primary))
		Expect(strings.Count(text, " streaming ")).To(Equal(int(current.Spec.Instances)-1), "one streaming row per replica:\n%s", text)
		Expect(text).NotTo(ContainSubstring("\x1b["), "colour when piped")

		user := secretValue(ctx, cluster.Namespace, cluster.Name+"-app", corev1.BasicAuthUsernameKey)
		out, err = kubectlPgpilot(ctx, cluster.Namespace, "psql", cluster.Name, "--", "-tAc", "SELECT current_user || ' ' || 1")
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.TrimSpace(out)).To(Equal(user + " 1"))

		out, err = kubectlPgpilot(ctx, cluster.Namespace, "status", "nosuch")
		Expect(err).To(HaveOccurred())
		Expect(strings.TrimSpace(out)).To(Equal(`error: postgrescluster "nosuch" not found in namespace "` + cluster.Namespace + `"`))
		out, err = kubectlPgpilot(ctx, cluster.Namespace, "promote", cluster.Name, cluster.Name+"-9")
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring(cluster.Name + "-9 is not an instance of postgrescluster"))
	})

	It("restarts every instance with kubectl pgpilot restart, rolling back to Ready with its rows", func(ctx SpecContext) {
		cluster := latest(ctx, clusterOf()) // the specs before scaled it
		before := map[string]types.UID{}
		for _, p := range clusterPods(ctx, cluster) {
			before[p.Name] = p.UID
		}
		start := time.Now()
		_, err := kubectlPgpilot(ctx, cluster.Namespace, "restart", cluster.Name, "--wait=6m")
		Expect(err).NotTo(HaveOccurred())
		AddReportEntry(fmt.Sprintf("kubectl pgpilot restart, %d instances, to Ready", cluster.Spec.Instances), time.Since(start).Round(time.Second).String())
		for _, p := range clusterPods(ctx, cluster) {
			Expect(p.UID).NotTo(Equal(before[p.Name]), "pod %s was not restarted", p.Name)
		}
		expectReplication(ctx, cluster, cluster.Spec.Instances)
		out, err := kubectlPgpilot(ctx, cluster.Namespace, "psql", cluster.Name, "--replica", "--", "-tAc", "SELECT msg FROM greetings")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("hello over streaming replication"))
	})

	It("writes a kubectl pgpilot report with no Secret's value in it, and merges the instances' logs", func(ctx SpecContext) {
		cluster := latest(ctx, clusterOf())
		file := filepath.Join(GinkgoT().TempDir(), "report.tar.gz")
		_, err := kubectlPgpilot(ctx, cluster.Namespace, "report", cluster.Name, "--file="+file)
		if info, statErr := os.Stat(file); statErr == nil {
			Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o600)), "the report is readable by others")
		}
		Expect(err).NotTo(HaveOccurred())
		files := readTarGz(file)
		dir := "pgpilot-report-" + cluster.Name + "/"
		for _, name := range []string{"postgrescluster.yaml", "status.txt", "events.yaml", "objects/Secret/" + cluster.Name + "-app.yaml",
			"objects/StatefulSet/" + cluster.Name + ".yaml", "logs/" + cluster.Name + "-0.log"} {
			Expect(files).To(HaveKey(dir+name), "the report has no %s", name)
		}
		Expect(files).To(HaveKeyWithValue(ContainSubstring(dir+"operator/"), Not(BeEmpty())), "the report has no operator log")
		for _, secret := range []string{"-app", "-superuser", "-replication", "-agent"} {
			value := secretValue(ctx, cluster.Namespace, cluster.Name+secret, "password")
			for name, content := range files {
				Expect(content).NotTo(ContainSubstring(value), "%s holds the password of %s", name, cluster.Name+secret)
				Expect(content).NotTo(ContainSubstring(base64.StdEncoding.EncodeToString([]byte(value))), "%s holds the password of %s", name, cluster.Name+secret)
			}
		}

		out, err := kubectlPgpilot(ctx, cluster.Namespace, "logs", cluster.Name, "--since=10m")
		Expect(err).NotTo(HaveOccurred())
		seen := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var record struct {
				Instance string `json:"instance"`
			}
			if json.Unmarshal([]byte(line), &record) == nil {
				seen[record.Instance] = true
			}
		}
		for i := range cluster.Spec.Instances {
			Expect(seen).To(HaveKey(fmt.Sprintf("%s-%d", cluster.Name, i)), "no record of instance %d in the merged logs", i)
		}
	})
}

// latest is c as the API server has it now.
func latest(ctx context.Context, c *pgv1.PostgresCluster) *pgv1.PostgresCluster {
	current := &pgv1.PostgresCluster{}
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), current)).To(Succeed())
	return current
}

// readTarGz is every file of a tar.gz, by name.
func readTarGz(path string) map[string]string {
	data, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	zr, err := gzip.NewReader(bytes.NewReader(data))
	Expect(err).NotTo(HaveOccurred())
	files := map[string]string{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		Expect(err).NotTo(HaveOccurred())
		content, err := io.ReadAll(tr)
		Expect(err).NotTo(HaveOccurred())
		files[h.Name] = string(content)
	}
}
