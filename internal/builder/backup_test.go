package builder

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

func s3Repository() pgv1.BackupRepository {
	return pgv1.BackupRepository{Endpoint: "s3.storage.svc:9000", Bucket: "pg", Path: "/teams/a/", Region: "eu-west-1",
		URIStyle: "path", CredentialsSecret: corev1.LocalObjectReference{Name: "s3-keys"}, CASecret: &corev1.LocalObjectReference{Name: "s3-ca"}}
}

func TestBackupConfig(t *testing.T) {
	tests := []struct {
		name string
		edit func(*pgv1.PostgresCluster)
		want *agentapi.BackupConfig
	}{
		{"no backup and no recovery", func(*pgv1.PostgresCluster) {}, nil},
		{"a repository: its own path under the prefix, the port apart, retention and defaults", func(c *pgv1.PostgresCluster) {
			c.Spec.Backup = &pgv1.ClusterBackupSpec{Repository: s3Repository(), Retention: &pgv1.BackupRetention{Full: 3}}
		}, &agentapi.BackupConfig{
			Repository:  &agentapi.Repository{Host: "s3.storage.svc", Port: 9000, Bucket: "pg", Path: "/teams/a/ns/db", Region: "eu-west-1", URIStyle: "path", CA: true},
			Compression: "lz4", Parallel: 1, RetentionFull: 3, RetentionFullType: "count",
		}},
		{"a recovery from another cluster of another namespace, to a time, exclusive", func(c *pgv1.PostgresCluster) {
			repo := s3Repository()
			repo.Endpoint, repo.Path, repo.CASecret = "s3.amazonaws.com", "", nil
			c.Spec.Bootstrap.Recovery = &pgv1.RecoverySpec{Repository: repo, ClusterName: "old", Namespace: "prod",
				Target: &pgv1.RecoveryTarget{Time: "2026-12-01T10:15:30.25Z", Exclusive: ptr.To(true)}}
		}, &agentapi.BackupConfig{
			Compression: "lz4", Parallel: 1,
			Recovery: &agentapi.Recovery{
				Repository: agentapi.Repository{Host: "s3.amazonaws.com", Bucket: "pg", Path: "/pgpilot/prod/old", Region: "eu-west-1", URIStyle: "path"},
				Target:     agentapi.RecoveryTarget{Type: "time", Value: "2026-12-01T10:15:30.25Z", Exclusive: true},
			},
		}},
		{"recovery to the end of the archive: no target", func(c *pgv1.PostgresCluster) {
			c.Spec.Bootstrap.Recovery = &pgv1.RecoverySpec{Repository: s3Repository(), ClusterName: "old"}
		}, &agentapi.BackupConfig{
			Compression: "lz4", Parallel: 1,
			Recovery: &agentapi.Recovery{Repository: agentapi.Repository{Host: "s3.storage.svc", Port: 9000, Bucket: "pg", Path: "/teams/a/ns/old",
				Region: "eu-west-1", URIStyle: "path", CA: true}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, BackupConfig(newCluster(tt.edit))); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestRecoveryTargets(t *testing.T) {
	for _, tt := range []struct {
		target pgv1.RecoveryTarget
		want   agentapi.RecoveryTarget
	}{
		{pgv1.RecoveryTarget{LSN: "0/3000060"}, agentapi.RecoveryTarget{Type: "lsn", Value: "0/3000060"}},
		{pgv1.RecoveryTarget{XID: "1234"}, agentapi.RecoveryTarget{Type: "xid", Value: "1234"}},
		{pgv1.RecoveryTarget{Name: "before-migration"}, agentapi.RecoveryTarget{Type: "name", Value: "before-migration"}},
		{pgv1.RecoveryTarget{Immediate: ptr.To(true)}, agentapi.RecoveryTarget{Type: "immediate"}},
	} {
		if got := recoveryTarget(&tt.target); got != tt.want {
			t.Errorf("recoveryTarget(%+v) = %+v, want %+v", tt.target, got, tt.want)
		}
	}
}

// A cluster with a repository archives through the agent; its keys reach the pod only as
// optional projections of the user's Secrets, so a missing Secret never keeps an instance down.
func TestBackupInThePod(t *testing.T) {
	c := newCluster(func(c *pgv1.PostgresCluster) { c.Spec.Backup = &pgv1.ClusterBackupSpec{Repository: s3Repository()} })
	conf := PostgresqlConf(c)
	for _, line := range []string{"archive_mode = on\n", "archive_command = '/pgpilot/bin/agent pgbackrest archive-push %p'\n"} {
		if !strings.Contains(conf, line) {
			t.Errorf("postgresql.conf lacks %q:\n%s", line, conf)
		}
	}
	if strings.Contains(PostgresqlConf(newCluster()), "archive_") {
		t.Error("a cluster without spec.backup archives")
	}
	cm := toTyped[corev1.ConfigMap](t, BuildConfigMap(c, agentapi.TLSPolicy{}))
	var backup agentapi.BackupConfig
	if err := json.Unmarshal([]byte(cm.Data[agentapi.BackupConfigFile]), &backup); err != nil || backup.Repository == nil {
		t.Errorf("ConfigMap %s: %q (%v)", agentapi.BackupConfigFile, cm.Data[agentapi.BackupConfigFile], err)
	}
	sts, err := BuildStatefulSet(c, Images{Postgres: "pg", Agent: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	typed := toTyped[appsv1.StatefulSet](t, sts)
	projected := map[string]string{}
	for _, v := range typed.Spec.Template.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.Secret.Name == "s3-keys" || src.Secret.Name == "s3-ca" {
				if src.Secret.Optional == nil || !*src.Secret.Optional {
					t.Errorf("projection of %s is not optional", src.Secret.Name)
				}
				for _, item := range src.Secret.Items {
					projected[item.Path] = src.Secret.Name + "/" + item.Key
				}
			}
		}
	}
	want := map[string]string{"backup-access-key-id": "s3-keys/ACCESS_KEY_ID", "backup-secret-access-key": "s3-keys/ACCESS_SECRET_KEY", "backup-ca.crt": "s3-ca/ca.crt"}
	if diff := cmp.Diff(want, projected); diff != "" {
		t.Errorf("projected repository files (-want +got):\n%s", diff)
	}
}
