//go:build e2e

package e2e

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// hostileTenantSpecs try, against the deployed operator and a Ready cluster of the suite that
// calls them, what a tenant who holds only the PostgresCluster editor role, or who got hold of an
// instance's token or may create pods, would do to get more. Each must be refused by the API
// server with a message, or come to nothing.
func hostileTenantSpecs(cluster func() *pgv1.PostgresCluster) {
	It("refuses an editor-only user, through their own kubeconfig, every way to the superuser, other Secrets and the backup configuration", func(ctx SpecContext) {
		c := cluster()
		editor := editorClient(ctx, c.Namespace)
		attempt := func(name string, mutate func(*pgv1.PostgresCluster)) error {
			hostile := &pgv1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace},
				Spec: pgv1.PostgresClusterSpec{Instances: 1, Storage: c.Spec.Storage}}
			mutate(hostile)
			err := editor.Create(ctx, hostile)
			if err == nil {
				DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, hostile))).To(Succeed()) })
			}
			return err
		}
		parameter := func(name, value string) func(*pgv1.PostgresCluster) {
			return func(h *pgv1.PostgresCluster) {
				h.Spec.PostgreSQL.Parameters = map[string]pgv1.ParameterValue{name: pgv1.ParameterValue(value)}
			}
		}

		By("settings that run a command or load a library, in any letter case")
		for name, value := range map[string]string{
			"archive_cleanup_command":   "sh -c 'id > /tmp/owned'",
			"recovery_end_command":      "sh -c 'id > /tmp/owned'",
			"ssl_passphrase_command":    "sh -c 'id > /tmp/owned'",
			"Shared_Preload_Libraries":  "/tmp/evil.so",
			"session_preload_libraries": "evil",
			"dynamic_library_path":      "/tmp",
		} {
			err := attempt("hostile-setting", parameter(name, value))
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s was admitted: %v", name, err)
			Expect(err.Error()).To(Or(ContainSubstring(name+" runs a command or loads code"), ContainSubstring("in other letter case")))
		}

		By("a pg_hba line that lets the superuser in without a password")
		err := attempt("hostile-hba", func(h *pgv1.PostgresCluster) {
			h.Spec.PostgreSQL.PgHBA = []string{"host all postgres 0.0.0.0/0 trust"}
		})
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("cannot name the roles pgpilot manag"))

		By("a line break into pgbackrest.conf")
		err = attempt("hostile-region", func(h *pgv1.PostgresCluster) {
			h.Spec.Backup = &pgv1.ClusterBackupSpec{Repository: pgv1.BackupRepository{Bucket: "backups", Endpoint: "s3.example.com",
				Region:            "us-east-1\nrepo1-storage-verify-tls=n",
				CredentialsSecret: corev1.LocalObjectReference{Name: c.Name + "-app"}}}
		})
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("spec.backup.repository.region"))

		By("naming the superuser's Secret, which the editor may not read, for pgpilot to project into pods")
		err = attempt("hostile-secret", func(h *pgv1.PostgresCluster) {
			h.Spec.Bootstrap.InitDB.Secret = &corev1.LocalObjectReference{Name: c.Name + "-superuser"}
		})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("names a Secret you may not read: " + c.Name + "-superuser"))
		// The operator writes the cluster's status meanwhile: a conflict is tried again.
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			current := &pgv1.PostgresCluster{}
			Expect(editor.Get(ctx, client.ObjectKeyFromObject(c), current)).To(Succeed(), "the editor may read the cluster")
			current.Spec.Monitoring.CustomQueries = []pgv1.CustomQueriesSource{{Secret: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: c.Name + "-superuser"}, Key: "password"}}}
			return editor.Update(ctx, current)
		})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "an update naming the superuser's Secret was admitted: %v", err)

		By("and the role itself grants neither the Secret nor a shell in the pods")
		Expect(apierrors.IsForbidden(editor.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Name + "-superuser"},
			&corev1.Secret{}))).To(BeTrue())
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: c.Namespace, Verb: "create", Resource: "pods", Subresource: "exec"}}}
		Expect(editor.Create(ctx, review)).To(Succeed())
		Expect(review.Status.Allowed).To(BeFalse(), "the editor may exec into pods")
	})

	It("refuses an instance's own token that moves the primary Lease to another instance", func(ctx SpecContext) {
		c := cluster()
		current := &pgv1.PostgresCluster{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), current)).To(Succeed())
		primary := current.Status.CurrentPrimary
		var standby string
		for _, pod := range clusterPods(ctx, c) {
			if pod.Name != primary {
				standby = pod.Name
			}
		}
		Expect(standby).NotTo(BeEmpty())
		// The holder renews the Lease every few seconds: a renewal between the read and the write
		// is a conflict, which the API server reports before admission could refuse the write.
		move := func(token kubernetes.Interface, change func(*coordinationv1.Lease)) error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				lease, err := token.CoordinationV1().Leases(c.Namespace).Get(ctx, pgbuilder.PrimaryLeaseName(c), metav1.GetOptions{})
				if err != nil {
					return err
				}
				change(lease)
				_, err = token.CoordinationV1().Leases(c.Namespace).Update(ctx, lease, metav1.UpdateOptions{})
				return err
			})
		}
		to := func(holder string) func(*coordinationv1.Lease) {
			return func(l *coordinationv1.Lease) {
				l.Spec.HolderIdentity, l.Spec.RenewTime = ptr.To(holder), ptr.To(metav1.NowMicro())
			}
		}
		Expect(move(podToken(ctx, c, standby), to(standby))).To(MatchError(ContainSubstring("does not hold the primary Lease")))
		Expect(move(podToken(ctx, c, primary), to(standby))).To(MatchError(ContainSubstring("not hand it to another")))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), current)).To(Succeed())
		Expect(current.Status.CurrentPrimary).To(Equal(primary))
		expectReplication(ctx, c, c.Spec.Instances)
	})

	It("never asks a pod that only carries the cluster's labels, nor sends it the agents' token", func(ctx SpecContext) {
		c := cluster()
		busybox := os.Getenv("E2E_BUSYBOX_IMAGE")
		Expect(busybox).NotTo(BeEmpty(), "E2E_BUSYBOX_IMAGE is unset: run the suite with `make test-e2e`")
		// Whoever may create pods in the namespace can make one look like the next instance, and
		// say it serves the agent API without TLS; it writes down every connection it gets.
		container := restrictedContainer(corev1.Container{Name: pgbuilder.PostgresContainerName, Image: busybox,
			Command: []string{"sh", "-c", "while true; do nc -l -p 8000 </dev/null >/tmp/request; echo \"contacted: $(head -c 200 /tmp/request)\"; done"},
			Ports:   []corev1.ContainerPort{{Name: "agent", ContainerPort: agentapi.DefaultAgentPort}}})
		container.SecurityContext.RunAsUser = ptr.To[int64](65534)
		container.VolumeMounts = []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}
		// Owned by something else: the StatefulSet would adopt an orphan that matches its selector,
		// and delete it as beyond its replicas.
		owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "decoy-owner", Namespace: c.Namespace}}
		Expect(k8s.Create(ctx, owner)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, owner))).To(Succeed()) })
		decoy := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: c.Name + "-7", Namespace: c.Namespace, Labels: pgbuilder.CommonLabels(c),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{container},
				Volumes: []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}}}
		Expect(k8s.Create(ctx, decoy)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, decoy))).To(Succeed()) })
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(decoy), decoy)).To(Succeed())
			g.Expect(podReady(decoy)).To(BeTrue())
		}).Should(Succeed())

		// Three of the operator's periodic looks at the cluster (15 s apart) while the decoy runs.
		Consistently(func(g Gomega) {
			current := &pgv1.PostgresCluster{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), current)).To(Succeed())
			g.Expect(current.Status.InstancesStatus).To(HaveLen(int(c.Spec.Instances)), "the decoy counted as an instance")
		}).WithTimeout(45 * time.Second).WithPolling(5 * time.Second).Should(Succeed())
		decoyLog := func() string {
			logs, err := clientset.CoreV1().Pods(c.Namespace).GetLogs(decoy.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			Expect(err).NotTo(HaveOccurred())
			return string(logs)
		}
		Expect(decoyLog()).NotTo(ContainSubstring("contacted"), "the operator reached the decoy")

		By("the decoy does write down a connection: this test's own")
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(decoy.Status.PodIP, "8000"), 5*time.Second)
		Expect(err).NotTo(HaveOccurred())
		_, err = conn.Write([]byte("GET /v1/status HTTP/1.1\r\n\r\n"))
		Expect(err).NotTo(HaveOccurred())
		Expect(conn.Close()).To(Succeed())
		Eventually(decoyLog).WithTimeout(30 * time.Second).Should(ContainSubstring("contacted: GET /v1/status"))
	})
}

// editorClient is a client with only the PostgresCluster editor role in namespace: a
// ServiceAccount bound to the role as installed, through a kubeconfig of its own.
func editorClient(ctx context.Context, namespace string) client.Client {
	GinkgoHelper()
	roles := &rbacv1.ClusterRoleList{}
	Expect(k8s.List(ctx, roles)).To(Succeed())
	var editorRole string
	for _, role := range roles.Items {
		if strings.HasSuffix(role.Name, "postgrescluster-editor-role") {
			editorRole = role.Name
		}
	}
	Expect(editorRole).NotTo(BeEmpty(), "the PostgresCluster editor role is not installed")
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "tenant-editor", Namespace: namespace}}
	Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, account))).To(Succeed())
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant-editor", Namespace: namespace},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: account.Name, Namespace: namespace}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: editorRole}}
	Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, binding))).To(Succeed())
	token, err := clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, account.Name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())

	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["local"] = &clientcmdapi.Cluster{Server: restConfig.Host, CertificateAuthorityData: restConfig.CAData,
		CertificateAuthority: restConfig.CAFile}
	kubeconfig.AuthInfos["tenant-editor"] = &clientcmdapi.AuthInfo{Token: token.Status.Token}
	kubeconfig.Contexts["tenant"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "tenant-editor", Namespace: namespace}
	kubeconfig.CurrentContext = "tenant"
	path := filepath.Join(GinkgoT().TempDir(), "kubeconfig")
	Expect(clientcmd.WriteToFile(*kubeconfig, path)).To(Succeed())
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	Expect(err).NotTo(HaveOccurred())
	editor, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	// RBAC caches: the binding may take a moment to apply.
	Eventually(func() error {
		return editor.List(ctx, &pgv1.PostgresClusterList{}, client.InNamespace(namespace))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	return editor
}

// podToken is a client with the cluster's instance ServiceAccount token bound to the running
// pod, the claims the kubelet projects into it.
func podToken(ctx context.Context, c *pgv1.PostgresCluster, pod string) kubernetes.Interface {
	GinkgoHelper()
	p, err := clientset.CoreV1().Pods(c.Namespace).Get(ctx, pod, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	token, err := clientset.CoreV1().ServiceAccounts(c.Namespace).CreateToken(ctx, pgbuilder.InstanceAccessName(c),
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600),
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}},
		metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	cfg := *restConfig
	cfg.BearerToken, cfg.BearerTokenFile, cfg.CertData, cfg.KeyData, cfg.CertFile, cfg.KeyFile = token.Status.Token, "", nil, nil, "", ""
	cfg.Username, cfg.Password = "", ""
	return kubernetes.NewForConfigOrDie(&cfg)
}
