package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// cachedDatabases is the cache as the catalog lane reads Databases from it, with objects.
func cachedDatabases(t *testing.T, objects ...client.Object) client.WithWatch {
	k8s, _ := countingWrites(t, objects...)
	return k8s
}

// countingWrites is cachedDatabases that counts the writes made through it, patches included.
func countingWrites(t *testing.T, objects ...client.Object) (client.WithWatch, *int) {
	withTypes(t)
	writes := new(int)
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objects...).WithStatusSubresource(&pgv1.Database{}).
		WithIndex(&pgv1.Database{}, databasesByClusterIndex, databaseCluster).
		WithInterceptorFuncs(interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				*writes++
				return c.Patch(ctx, obj, patch, opts...)
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				*writes++
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		}).Build(), writes
}

// fakeRolesAgent is the primary's agent as the catalog lane sees it.
type fakeRolesAgent struct {
	applied []agentapi.CatalogRequest
	report  *agentapi.CatalogReport
	reads   int
}

func (f *fakeRolesAgent) ApplyCatalog(_ context.Context, _ agentapi.Endpoint, req agentapi.CatalogRequest) error {
	f.applied = append(f.applied, req)
	return nil
}

func (f *fakeRolesAgent) CatalogReport(context.Context, agentapi.Endpoint) (*agentapi.CatalogReport, error) {
	f.reads++
	return f.report, nil
}

// countingReader counts what the lane reads from the API server.
type countingReader struct {
	client.Reader
	gets int
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets++
	return c.Reader.Get(ctx, key, obj, opts...)
}

// The lane sends the primary the declared roles only when the set it holds is another, reads its
// report only when the status names a new one, and reads the role Secrets again only after a
// minute: a cluster whose roles stand costs no request at all. A deleted Secret sends the role
// without a password (kept as it is), and says so in the role's status.
func TestEnsureCatalogSendsAndReadsOnlyWhatMoved(t *testing.T) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "reader-pw", Namespace: "ns", ResourceVersion: "5"},
		Data: map[string][]byte{corev1.BasicAuthPasswordKey: []byte("pw")}}
	apiServer := fake.NewClientBuilder().WithObjects(secret).Build()
	reader := &countingReader{Reader: apiServer}
	agent := &fakeRolesAgent{}
	recorder := events.NewFakeRecorder(10)
	r := &PostgresClusterReconciler{Client: cachedDatabases(t), APIReader: reader, CatalogAgents: agent, Recorder: recorder}
	cluster := testCluster(2)
	cluster.Spec.Bootstrap.InitDB.Owner = "app"
	cluster.Spec.Roles = []pgv1.ManagedRoleSpec{{Name: "reader", Login: true, PasswordSecret: &corev1.LocalObjectReference{Name: "reader-pw"}}}
	held := &agentapi.CatalogState{}
	pass := func() {
		t.Helper()
		s := newScope(cluster)
		s.primary = "db-0"
		s.observed.Pods = []corev1.Pod{testPod("db-0", "", true)}
		report := *primaryReport
		if held.Fingerprint != "" {
			report.Catalog = held
		}
		s.observed.Reports = map[string]*agentapi.Status{"db-0": &report}
		if stop, err := r.ensureCatalog(context.Background(), s); stop != nil || err != nil {
			t.Fatalf("ensureCatalog = %v, %v", stop, err)
		}
		cluster = s.cluster
	}

	pass()
	if len(agent.applied) != 1 || *agent.applied[0].Roles[0].Password != "pw" || reader.gets != 1 {
		t.Fatalf("first pass: applied %+v after %d reads", agent.applied, reader.gets)
	}
	fingerprint := agent.applied[0].Fingerprint
	held.Fingerprint = fingerprint
	pass() // the agent holds the set, no report yet
	agent.report = &agentapi.CatalogReport{Fingerprint: fingerprint, Generation: 1,
		Roles: []agentapi.RoleResult{{Name: "reader", State: agentapi.RoleApplied, Changed: []string{"created"}}}}
	held.Report = agent.report.ID()
	pass()
	if got := cluster.Status.Roles; len(got) != 1 || got[0].State != agentapi.RoleApplied || cluster.Status.CatalogReported != held.Report {
		t.Fatalf("status %+v, reported %q", got, cluster.Status.CatalogReported)
	}
	if event := <-recorder.Events; event != "Normal RoleApplied role reader: [created]" {
		t.Errorf("event %q", event)
	}
	before := *reader
	beforeReads := agent.reads
	pass()
	pass()
	if len(agent.applied) != 1 || reader.gets != before.gets || agent.reads != beforeReads {
		t.Fatalf("standing roles cost %d sends, %d Secret reads, %d report reads", len(agent.applied)-1, reader.gets-before.gets, agent.reads-beforeReads)
	}

	// The Secret is deleted; a minute later the lane notices.
	if err := apiServer.Delete(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: "ns", Name: "db"}
	seen := r.memory().roles.get(key)
	seen.readAt = seen.readAt.Add(-rolesSecretsInterval)
	r.memory().roles.set(key, seen)
	pass()
	if len(agent.applied) != 2 || agent.applied[1].Roles[0].Password != nil || agent.applied[1].Fingerprint == fingerprint {
		t.Fatalf("after the Secret's deletion: applied %+v", agent.applied)
	}
	held.Fingerprint = agent.applied[1].Fingerprint
	agent.report = &agentapi.CatalogReport{Fingerprint: held.Fingerprint, Generation: 2,
		Roles: []agentapi.RoleResult{{Name: "reader", State: agentapi.RoleApplied}}}
	held.Report = agent.report.ID()
	pass()
	if got := cluster.Status.Roles[0]; !strings.Contains(got.Message, `"reader-pw" does not exist`) {
		t.Errorf("status %+v, want the missing Secret named", got)
	}
	if event := <-recorder.Events; !strings.HasPrefix(event, "Warning RolePasswordKept role reader") {
		t.Errorf("event %q", event)
	}
}

// A cluster's Databases go to the primary with the roles: the older of two naming one database
// wins and the other says why; each gets its state from the agent's report; one with
// reclaimPolicy delete carries a finalizer, and deleting it sends its database as absent and lets
// the object go only once the report says the database is gone. A retained one goes at once.
func TestEnsureCatalogAppliesDatabasesAndDropsOnlyWhenAsked(t *testing.T) {
	ctx := context.Background()
	database := func(name, dbName string, age time.Duration, policy pgv1.ReclaimPolicy) *pgv1.Database {
		return &pgv1.Database{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Generation: 1,
			CreationTimestamp: metav1.NewTime(time.Now().Add(-age).Truncate(time.Second))},
			Spec: pgv1.DatabaseSpec{Cluster: corev1.LocalObjectReference{Name: "db"}, Name: dbName, Owner: "shop", ReclaimPolicy: policy}}
	}
	k8s, writes := countingWrites(t, database("shop", "shop", time.Hour, pgv1.ReclaimDelete), database("shop-copy", "shop", time.Minute, pgv1.ReclaimRetain),
		database("kept", "kept", time.Minute, pgv1.ReclaimRetain))
	agent := &fakeRolesAgent{}
	r := &PostgresClusterReconciler{Client: k8s, APIReader: k8s, CatalogAgents: agent, Recorder: events.NewFakeRecorder(50)}
	cluster := testCluster(2)
	cluster.Spec.Bootstrap.InitDB.Owner, cluster.Spec.Bootstrap.InitDB.Database = "app", "app"
	held := &agentapi.CatalogState{}
	pass := func() {
		t.Helper()
		s := newScope(cluster)
		s.primary = "db-0"
		s.observed.Pods = []corev1.Pod{testPod("db-0", "", true)}
		report := *primaryReport
		report.Catalog = held
		s.observed.Reports = map[string]*agentapi.Status{"db-0": &report}
		if stop, err := r.ensureCatalog(ctx, s); stop != nil || err != nil {
			t.Fatalf("ensureCatalog = %v, %v", stop, err)
		}
		cluster = s.cluster
	}
	get := func(name string) *pgv1.Database {
		t.Helper()
		db := &pgv1.Database{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: "ns", Name: name}, db); err != nil {
			t.Fatal(err)
		}
		return db
	}
	generation := int64(0)
	answer := func(results ...agentapi.DatabaseResult) {
		t.Helper()
		last := agent.applied[len(agent.applied)-1]
		held.Fingerprint = last.Fingerprint
		generation++
		agent.report = &agentapi.CatalogReport{Fingerprint: last.Fingerprint, Generation: generation, Databases: results}
		held.Report = agent.report.ID()
		pass()
	}

	pass()
	if len(agent.applied) != 1 || len(agent.applied[0].Databases) != 2 || agent.applied[0].Databases[0].Name != "shop" ||
		!slices.Equal(agent.applied[0].ForbiddenDatabases, []string{"app"}) {
		t.Fatalf("sent %+v", agent.applied)
	}
	if db := get("shop"); !slices.Contains(db.Finalizers, pgv1.DatabaseDropFinalizer) {
		t.Errorf("shop (reclaimPolicy delete) has finalizers %v", db.Finalizers)
	}
	if db := get("shop-copy"); db.Status.State != agentapi.RoleError || !strings.Contains(db.Status.Message, "declared by the older Database shop") {
		t.Errorf("shop-copy: %+v", db.Status)
	}
	answer(agentapi.DatabaseResult{Name: "shop", State: agentapi.RoleApplied, Changed: []string{"created"},
		Extensions: []agentapi.ItemResult{{Name: "hstore", State: agentapi.RoleApplied, Version: "1.8"}}},
		agentapi.DatabaseResult{Name: "kept", State: agentapi.RoleApplied})
	if db := get("shop"); db.Status.State != agentapi.RoleApplied || db.Status.ObservedGeneration != 1 || db.Status.Extensions[0].Version != "1.8" {
		t.Errorf("shop: %+v", db.Status)
	}
	// Standing Databases cost no send, no report read and no write.
	sends, reads, written := len(agent.applied), agent.reads, *writes
	pass()
	pass()
	if len(agent.applied) != sends || agent.reads != reads || *writes != written {
		t.Errorf("standing Databases cost %d sends, %d report reads, %d writes", len(agent.applied)-sends, agent.reads-reads, *writes-written)
	}

	// Deleted: shop is sent absent and stays until its database is gone; kept goes at once.
	for _, name := range []string{"shop", "kept"} {
		if err := k8s.Delete(ctx, get(name)); err != nil {
			t.Fatal(err)
		}
	}
	pass()
	last := agent.applied[len(agent.applied)-1]
	if len(last.Databases) != 1 || !last.Databases[0].Absent {
		t.Fatalf("after the deletions sent %+v", last.Databases)
	}
	answer(agentapi.DatabaseResult{Name: "shop", State: agentapi.RoleError, Message: "database is being accessed by other users"})
	if db := get("shop"); db.Status.State != agentapi.RoleError {
		t.Errorf("shop while a client holds it: %+v", db.Status)
	}
	answer(agentapi.DatabaseResult{Name: "shop", State: agentapi.ItemAbsent, Changed: []string{"dropped"}})
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "shop"}, &pgv1.Database{}); !apierrors.IsNotFound(err) {
		t.Errorf("shop after its database was dropped: %v", err)
	}

	// A database pgpilot did not make is kept, and its Database goes all the same.
	payroll := database("payroll", "payroll", time.Second, pgv1.ReclaimDelete)
	payroll.CreationTimestamp = metav1.Time{}
	if err := k8s.Create(ctx, payroll); err != nil {
		t.Fatal(err)
	}
	pass()
	if err := k8s.Delete(ctx, get("payroll")); err != nil {
		t.Fatal(err)
	}
	pass()
	answer(agentapi.DatabaseResult{Name: "payroll", State: agentapi.DatabaseKept, Message: "pgpilot did not make this database"})
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "payroll"}, &pgv1.Database{}); !apierrors.IsNotFound(err) {
		t.Errorf("payroll after its database was kept: %v", err)
	}
}
