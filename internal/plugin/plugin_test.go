package plugin

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

func TestRedactSecretKeepsKeysAndNoValue(t *testing.T) {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "db-app", Annotations: map[string]string{
			corev1.LastAppliedConfigAnnotation: `{"stringData":{"password":"hunter2hunter2"}}`, "keep": "me"}},
		Data:       map[string][]byte{"password": []byte("hunter2hunter2"), "username": []byte("app")},
		StringData: map[string]string{"uri": "postgresql://app:hunter2hunter2@db-rw/app"},
	}
	data, err := yaml.Marshal(RedactSecret(s))
	if err != nil {
		t.Fatal(err)
	}
	out := string(data)
	for _, secret := range []string{"hunter2", "aHVudGVy" /* base64 of hunter */, "postgresql://"} {
		if strings.Contains(out, secret) {
			t.Errorf("redacted Secret still holds %q:\n%s", secret, out)
		}
	}
	for _, kept := range []string{"password:", "username:", "uri:", "keep: me", "name: db-app"} {
		if !strings.Contains(out, kept) {
			t.Errorf("redacted Secret lost %q:\n%s", kept, out)
		}
	}
	if string(s.Data["password"]) != "hunter2hunter2" {
		t.Error("RedactSecret changed its argument")
	}
}

func TestMergeLogsOrdersRecordsByTimeAndKeepsOtherLines(t *testing.T) {
	db0 := []string{
		`{"time":"2026-12-02T10:00:01Z","msg":"a"}`,
		`not json, after a`,
		`{"time":"2026-12-02T10:00:04Z","msg":"d"}`,
	}
	db1 := []string{
		`{"time":"2026-12-02T10:00:02Z","msg":"b"}`,
		`{"time":"2026-12-02T10:00:03Z","msg":"c"}`,
	}
	want := []string{db0[0], db0[1], db1[0], db1[1], db0[2]}
	if diff := cmp.Diff(want, MergeLogs(db0, db1)); diff != "" {
		t.Errorf("merged (-want +got):\n%s", diff)
	}
}

func TestPickInstance(t *testing.T) {
	c := &pgv1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Status: pgv1.PostgresClusterStatus{CurrentPrimary: "db-1"}}
	notReady := testPod("db-0", "n", 0)
	notReady.Status.Conditions[0].Status = corev1.ConditionFalse
	pods := []corev1.Pod{notReady, testPod("db-1", "n", 0), testPod("db-2", "n", 0)}
	tests := []struct {
		name    string
		replica bool
		primary string
		want    string
		wantErr string
	}{
		{name: "primary", primary: "db-1", want: "db-1"},
		{name: "a ready replica", replica: true, primary: "db-1", want: "db-2"},
		{name: "no primary", primary: "", wantErr: "has no primary now"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.Status.CurrentPrimary = tt.primary
			got, err := pickInstance(c, pods, tt.replica)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("pickInstance = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	c.Status.CurrentPrimary = "db-2"
	if _, err := pickInstance(c, []corev1.Pod{notReady, testPod("db-2", "n", 0)}, true); err == nil || !strings.Contains(err.Error(), "no ready replica") {
		t.Errorf("only the primary ready: err = %v", err)
	}
}

func TestExecArgsPassKubectlFlagsOn(t *testing.T) {
	flags := genericclioptions.NewConfigFlags(true)
	flags.KubeConfig, flags.Context = ptr.To("/home/me/.kube/other"), ptr.To("staging")
	s := &session{flags: flags, namespace: "shop"}
	got := s.execArgs("db-1", true, []string{"/pgpilot/bin/agent", "psql", "-c", "select 1"})
	want := []string{"exec", "-i", "-t", "--kubeconfig=/home/me/.kube/other", "--context=staging", "--namespace=shop", "db-1",
		"--container=postgres", "--", "/pgpilot/bin/agent", "psql", "-c", "select 1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kubectl args (-want +got):\n%s", diff)
	}
}

func TestInstanceOfNamesTheInstances(t *testing.T) {
	c := &pgv1.PostgresCluster{ObjectMeta: metav1.ObjectMeta{Name: "db"}}
	err := instanceOf(c, []corev1.Pod{testPod("db-0", "n", 0), testPod("db-1", "n", 0)}, "db-7")
	if err == nil || err.Error() != `db-7 is not an instance of postgrescluster "db" (its instances: [db-0 db-1])` {
		t.Errorf("err = %v", err)
	}
}
