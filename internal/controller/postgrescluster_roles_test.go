package controller

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// fakeRolesAgent is the primary's agent as the roles lane sees it.
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
func TestEnsureManagedRolesSendsAndReadsOnlyWhatMoved(t *testing.T) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "reader-pw", Namespace: "ns", ResourceVersion: "5"},
		Data: map[string][]byte{corev1.BasicAuthPasswordKey: []byte("pw")}}
	apiServer := fake.NewClientBuilder().WithObjects(secret).Build()
	reader := &countingReader{Reader: apiServer}
	agent := &fakeRolesAgent{}
	recorder := events.NewFakeRecorder(10)
	r := &PostgresClusterReconciler{APIReader: reader, CatalogAgents: agent, Recorder: recorder}
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
		if stop, err := r.ensureManagedRoles(context.Background(), s); stop != nil || err != nil {
			t.Fatalf("ensureManagedRoles = %v, %v", stop, err)
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
