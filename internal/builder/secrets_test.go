package builder

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

func TestGeneratedCredentials(t *testing.T) {
	superuser := Credential{SecretName: "db-superuser", Username: "postgres"}
	replication := Credential{SecretName: "db-replication", Username: "streaming_replica"}
	agent := Credential{SecretName: "db-agent", Username: "pgpilot-operator"}
	tests := []struct {
		name          string
		mutate        func(*pgv1.PostgresCluster)
		want          []Credential
		wantAppSecret string
	}{
		{
			name:          "no user secret: app secret is generated for the owner",
			want:          []Credential{superuser, replication, agent, {SecretName: "db-app", Username: "app"}},
			wantAppSecret: "db-app",
		},
		{
			name:          "owner name is used as the app username",
			mutate:        func(c *pgv1.PostgresCluster) { c.Spec.Bootstrap.InitDB.Owner = "shop" },
			want:          []Credential{superuser, replication, agent, {SecretName: "db-app", Username: "shop"}},
			wantAppSecret: "db-app",
		},
		{
			name: "user secret: app secret is not generated and its name is followed",
			mutate: func(c *pgv1.PostgresCluster) {
				c.Spec.Bootstrap.InitDB.Secret = &corev1.LocalObjectReference{Name: "my-app-creds"}
			},
			want:          []Credential{superuser, replication, agent},
			wantAppSecret: "my-app-creds",
		},
		{
			// The CRD accepts secret: {} (the name defaults to ""); it must behave as unset, or
			// pgpilot would wait forever for a db-app Secret that nobody creates.
			name: "empty secret reference counts as unset",
			mutate: func(c *pgv1.PostgresCluster) {
				c.Spec.Bootstrap.InitDB.Secret = &corev1.LocalObjectReference{}
			},
			want:          []Credential{superuser, replication, agent, {SecretName: "db-app", Username: "app"}},
			wantAppSecret: "db-app",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mutators []func(*pgv1.PostgresCluster)
			if tt.mutate != nil {
				mutators = append(mutators, tt.mutate)
			}
			c := newCluster(mutators...)
			if diff := cmp.Diff(tt.want, GeneratedCredentials(c)); diff != "" {
				t.Errorf("GeneratedCredentials (-want +got):\n%s", diff)
			}
			if got := AppSecretName(c); got != tt.wantAppSecret {
				t.Errorf("AppSecretName = %q, want %q", got, tt.wantAppSecret)
			}
			if got, want := UsesUserAppSecret(c), tt.wantAppSecret != "db-app"; got != want {
				t.Errorf("UsesUserAppSecret = %v, want %v", got, want)
			}
		})
	}
}

func TestBuildCredentialSecret(t *testing.T) {
	tests := []struct {
		name     string
		cred     Credential
		password string
	}{
		{name: "superuser", cred: Credential{SecretName: "db-superuser", Username: "postgres"}, password: "s3cret"},
		{name: "app owner", cred: Credential{SecretName: "db-app", Username: "app"}, password: "p@ss'word"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BuildCredentialSecret(newCluster(), tt.cred, tt.password)
			want := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{
					Name:            tt.cred.SecretName,
					Namespace:       "ns",
					Labels:          wantCommonLabels(),
					OwnerReferences: []metav1.OwnerReference{wantOwnerReference()},
				},
				Type:       corev1.SecretTypeBasicAuth,
				StringData: map[string]string{"username": tt.cred.Username, "password": tt.password},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("secret (-want +got):\n%s", diff)
			}
			if got.Type != "kubernetes.io/basic-auth" {
				t.Errorf("type = %q, want kubernetes.io/basic-auth", got.Type)
			}
			if got.Labels["app.kubernetes.io/managed-by"] != "pgpilot" {
				t.Errorf("managed-by label = %q, want pgpilot", got.Labels["app.kubernetes.io/managed-by"])
			}
		})
	}
}
