package manager_test

import (
	"fmt"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/instance/agent"
)

// The rules RBAC cannot express, which the manager installs as admission policies: whoever
// names a Secret in a PostgresCluster must be able to read it, and an instance's token moves
// the primary Lease only as an instance may. The manager watches another namespace, so nothing
// here is reconciled: the API server alone answers.
var _ = Describe("Admission policies", Ordered, func() {
	var admin client.Client
	var namespace string

	BeforeAll(func(ctx SpecContext) {
		scheme := runtime.NewScheme()
		utilruntime.Must(clientgoscheme.AddToScheme(scheme))
		utilruntime.Must(pgv1.AddToScheme(scheme))
		var err error
		admin, err = client.New(cp.Config, client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tenant-"}}
		Expect(admin.Create(ctx, ns)).To(Succeed())
		namespace = ns.Name
		startManagerWithEnv("admission", []string{"WATCH_NAMESPACE=elsewhere"})
	})

	cluster := func(name string, mutate func(*pgv1.PostgresCluster)) *pgv1.PostgresCluster {
		c := &pgv1.PostgresCluster{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			Spec:       pgv1.PostgresClusterSpec{Instances: 2, Storage: pgv1.StorageSpec{Size: resource.MustParse("1Gi")}},
		}
		if mutate != nil {
			mutate(c)
		}
		return c
	}

	It("refuses a PostgresCluster editor a Secret they cannot read, in every field that names one", func(ctx SpecContext) {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "payroll-db", Namespace: namespace},
			StringData: map[string]string{"username": "payroll", "password": "not-yours"}}
		Expect(admin.Create(ctx, secret)).To(Succeed())
		kubeconfig, err := cp.UserKubeconfig(ctx, admin, "tenant-editor",
			filepath.Join("..", "..", "config", "rbac", "postgrescluster_editor_role.yaml"), namespace)
		Expect(err).NotTo(HaveOccurred())
		editor := clientFor(kubeconfig, admin.Scheme())

		By("refusing each reference, with a message naming the Secret")
		references := map[string]func(*pgv1.PostgresCluster){
			"initdb": func(c *pgv1.PostgresCluster) {
				c.Spec.Bootstrap.InitDB.Secret = &corev1.LocalObjectReference{Name: secret.Name}
			},
			"custom queries": func(c *pgv1.PostgresCluster) {
				c.Spec.Monitoring.CustomQueries = []pgv1.CustomQueriesSource{{Secret: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: secret.Name}, Key: "password"}}}
			},
			"backup credentials": func(c *pgv1.PostgresCluster) {
				c.Spec.Backup = &pgv1.ClusterBackupSpec{Repository: pgv1.BackupRepository{
					Bucket: "backups", Endpoint: "s3.example.com", CredentialsSecret: corev1.LocalObjectReference{Name: secret.Name}}}
			},
			"server certificate": func(c *pgv1.PostgresCluster) { c.Spec.Certificates.ServerTLSSecret = secret.Name },
			"role password": func(c *pgv1.PostgresCluster) {
				c.Spec.Roles = []pgv1.ManagedRoleSpec{{Name: "group"}, {Name: "payroll", Login: true, PasswordSecret: &corev1.LocalObjectReference{Name: secret.Name}}}
			},
		}
		// The manager installs the policies as it starts; the first refusal may take a moment.
		Eventually(func(g Gomega) {
			err := editor.Create(ctx, cluster("steal", references["initdb"]))
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
			g.Expect(err.Error()).To(ContainSubstring("names a Secret you may not read: payroll-db (spec.bootstrap.initdb.secret.name)"))
		}).Should(Succeed())
		for field, reference := range references {
			err := editor.Create(ctx, cluster("steal", reference))
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: %v", field, err)
		}

		By("admitting a cluster that names no Secret, and refusing an update that adds one")
		own := cluster("own", nil)
		Expect(editor.Create(ctx, own)).To(Succeed())
		references["custom queries"](own)
		Expect(apierrors.IsForbidden(editor.Update(ctx, own))).To(BeTrue())

		By("admitting a cluster that names many Secrets its author may read, each checked within the API server's CEL budget")
		var names []string
		for i := range 6 {
			readable := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("readable-%d", i), Namespace: namespace}}
			Expect(admin.Create(ctx, readable)).To(Succeed())
			names = append(names, readable.Name)
		}
		many := cluster("many", func(c *pgv1.PostgresCluster) {
			c.Spec.Bootstrap.InitDB.Secret = &corev1.LocalObjectReference{Name: names[0]}
			c.Spec.Backup = &pgv1.ClusterBackupSpec{Repository: pgv1.BackupRepository{Bucket: "backups", Endpoint: "s3.example.com",
				CredentialsSecret: corev1.LocalObjectReference{Name: names[1]}, CASecret: &corev1.LocalObjectReference{Name: names[2]}}}
			c.Spec.Certificates = pgv1.CertificatesSpec{ServerTLSSecret: names[3], ServerCASecret: names[4], ClientCASecret: names[5]}
			for _, name := range names {
				c.Spec.Monitoring.CustomQueries = append(c.Spec.Monitoring.CustomQueries, pgv1.CustomQueriesSource{Secret: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: "queries"}})
			}
			for i := range pgv1.MaxRolePasswordSecrets {
				c.Spec.Roles = append(c.Spec.Roles, pgv1.ManagedRoleSpec{Name: fmt.Sprintf("login_%d", i), Login: true,
					PasswordSecret: &corev1.LocalObjectReference{Name: names[i%len(names)]}})
			}
		})
		Expect(admin.Create(ctx, many)).To(Succeed())

		By("keeping references someone allowed to read the Secret made: the editor may still edit the rest")
		shared := cluster("shared", references["backup credentials"])
		Expect(admin.Create(ctx, shared)).To(Succeed())
		Expect(editor.Get(ctx, client.ObjectKeyFromObject(shared), shared)).To(Succeed())
		shared.Spec.Instances = 3
		Expect(editor.Update(ctx, shared)).To(Succeed())
	})

	It("lets an instance's token renew or give up only its own pod's holding of the primary Lease", func(ctx SpecContext) {
		owner := cluster("db", nil)
		Expect(admin.Create(ctx, owner)).To(Succeed())
		clientset := kubernetes.NewForConfigOrDie(cp.Config)
		_, err := clientset.CoreV1().ServiceAccounts(namespace).Apply(ctx, pgbuilder.BuildInstanceServiceAccount(owner), metav1.ApplyOptions{FieldManager: "test"})
		Expect(err).NotTo(HaveOccurred())
		_, err = clientset.RbacV1().Roles(namespace).Apply(ctx, pgbuilder.BuildInstanceRole(owner), metav1.ApplyOptions{FieldManager: "test"})
		Expect(err).NotTo(HaveOccurred())
		_, err = clientset.RbacV1().RoleBindings(namespace).Apply(ctx, pgbuilder.BuildInstanceRoleBinding(owner), metav1.ApplyOptions{FieldManager: "test"})
		Expect(err).NotTo(HaveOccurred())
		Expect(admin.Create(ctx, pgbuilder.BuildPrimaryLease(owner, "db-0", metav1.NowMicro()))).To(Succeed())

		holder := instanceLeases(ctx, clientset, owner, "db-0")
		other := instanceLeases(ctx, clientset, owner, "db-1")
		unbound := instanceLeases(ctx, clientset, owner, "")
		leases := func(c kubernetes.Interface) func(func(*coordinationv1.Lease)) error {
			return func(change func(*coordinationv1.Lease)) error {
				lease, err := c.CoordinationV1().Leases(namespace).Get(ctx, pgbuilder.PrimaryLeaseName(owner), metav1.GetOptions{})
				if err != nil {
					return err
				}
				change(lease)
				_, err = c.CoordinationV1().Leases(namespace).Update(ctx, lease, metav1.UpdateOptions{})
				return err
			}
		}
		renew := func(l *coordinationv1.Lease) { l.Spec.RenewTime = ptr.To(metav1.NowMicro()) }
		takeOver := func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("db-1"); renew(l) }

		By("refusing a standby's token that takes the Lease over")
		Eventually(func(g Gomega) {
			err := leases(other)(takeOver)
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
			g.Expect(err.Error()).To(ContainSubstring("instance db-1 does not hold the primary Lease"))
		}).Should(Succeed())
		By("refusing the holder's token that hands the Lease to another, or counts a grant")
		Expect(leases(holder)(takeOver)).To(MatchError(ContainSubstring("not hand it to another")))
		Expect(leases(holder)(func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To(int32(5)) })).
			To(MatchError(ContainSubstring("only the primary Lease's holder and renewal time")))
		By("refusing the instances' account with a token bound to no pod")
		Expect(leases(unbound)(renew)).To(MatchError(ContainSubstring("its own pod's ServiceAccount token")))

		By("letting the holder's agent renew after the operator wrote the Lease, the same holder kept")
		keeper := &agent.LeaseKeeper{Holder: "db-0", Store: &agent.KubeLeases{
			Client: holder.CoordinationV1(), Namespace: namespace, Name: pgbuilder.PrimaryLeaseName(owner)}}
		_, err = keeper.Read(ctx)
		Expect(err).NotTo(HaveOccurred())
		// The operator writes the Lease meanwhile, the same holder kept (a grant counted again).
		Expect(leases(clientset)(func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To(int32(1)) })).To(Succeed())
		renewed, err := keeper.Renew(ctx)
		Expect(err).NotTo(HaveOccurred(), "a stale copy must be read again and renewed")
		Expect(renewed.Holder).To(Equal("db-0"))

		By("letting the holder renew and give up its holding, and the operator grant it")
		Expect(leases(holder)(renew)).To(Succeed())
		Expect(leases(holder)(func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("") })).To(Succeed())
		Expect(leases(clientset)(func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity = ptr.To("db-1")
			l.Spec.LeaseTransitions = ptr.To(int32(2))
		})).To(Succeed())
		Expect(leases(other)(renew)).To(Succeed())
	})
})

// instanceLeases is a client with the cluster's instance ServiceAccount token bound to pod (a
// pod object is made for it; no kubelet runs it), or bound to nothing when pod is empty.
func instanceLeases(ctx SpecContext, admin kubernetes.Interface, c *pgv1.PostgresCluster, pod string) kubernetes.Interface {
	GinkgoHelper()
	account := pgbuilder.InstanceAccessName(c)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if pod != "" {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: c.Namespace},
			Spec: corev1.PodSpec{ServiceAccountName: account, Containers: []corev1.Container{{Name: "postgres", Image: "none"}}}}
		p, err := admin.CoreV1().Pods(c.Namespace).Create(ctx, p, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}
	}
	token, err := admin.CoreV1().ServiceAccounts(c.Namespace).CreateToken(ctx, account, req, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	cfg := rest.AnonymousClientConfig(cp.Config)
	cfg.BearerToken = token.Status.Token
	cfg.Timeout = 10 * time.Second
	return kubernetes.NewForConfigOrDie(cfg)
}

func clientFor(kubeconfig string, scheme *runtime.Scheme) client.Client {
	GinkgoHelper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}
