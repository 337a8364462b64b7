package builder

import (
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	"github.com/pgpilot/pgpilot-operator/internal/certs"
)

func TestServerDNSNames(t *testing.T) {
	want := []string{
		"db-rw", "db-rw.ns", "db-rw.ns.svc", "db-rw.ns.svc.cluster.local",
		"db-ro", "db-ro.ns", "db-ro.ns.svc", "db-ro.ns.svc.cluster.local",
		"db-r", "db-r.ns", "db-r.ns.svc", "db-r.ns.svc.cluster.local",
		"*.db-instances.ns.svc", "*.db-instances.ns.svc.cluster.local",
	}
	if diff := cmp.Diff(want, ServerDNSNames(newCluster())); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	if got := AgentServerName(newCluster()); got != "db-r.ns.svc" {
		t.Errorf("AgentServerName = %q, want one of the server names", got)
	}
}

func TestCertificateLifetimes(t *testing.T) {
	tests := []struct {
		name              string
		duration, renew   *metav1.Duration
		wantLife, wantPre time.Duration
	}{
		{name: "defaults", wantLife: 90 * 24 * time.Hour, wantPre: 7 * 24 * time.Hour},
		{name: "set", duration: &metav1.Duration{Duration: time.Hour}, renew: &metav1.Duration{Duration: time.Minute},
			wantLife: time.Hour, wantPre: time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(func(c *pgv1.PostgresCluster) {
				c.Spec.Certificates = pgv1.CertificatesSpec{Duration: tt.duration, RenewBefore: tt.renew}
			})
			if got := CertificateDuration(c); got != tt.wantLife {
				t.Errorf("CertificateDuration = %s, want %s", got, tt.wantLife)
			}
			if got := RenewBefore(c); got != tt.wantPre {
				t.Errorf("RenewBefore = %s, want %s", got, tt.wantPre)
			}
		})
	}
}

func TestAppConnection(t *testing.T) {
	got := AppConnection(newCluster(), "app", "p@ss word/&?", []byte("CA"))
	uri, err := url.Parse(string(got[AppURIKey]))
	if err != nil {
		t.Fatalf("uri: %v", err)
	}
	password, _ := uri.User.Password()
	if uri.Scheme != "postgresql" || uri.User.Username() != "app" || password != "p@ss word/&?" ||
		uri.Host != "db-rw.ns.svc:5432" || uri.Path != "/app" || uri.Query().Get("sslmode") != "verify-full" {
		t.Errorf("uri %s does not reach app@db-rw.ns.svc:5432/app with verify-full", uri)
	}
	jdbc, err := url.Parse(string(got[AppJDBCURIKey])[len("jdbc:"):])
	if err != nil {
		t.Fatalf("jdbc-uri: %v", err)
	}
	if q := jdbc.Query(); jdbc.Host != "db-rw.ns.svc:5432" || q.Get("password") != "p@ss word/&?" || q.Get("sslmode") != "verify-full" {
		t.Errorf("jdbc-uri %s", got[AppJDBCURIKey])
	}
	for key, want := range map[string]string{AppHostKey: "db-rw.ns.svc", AppPortKey: "5432", AppDatabaseKey: "app", AppCAKey: "CA"} {
		if string(got[key]) != want {
			t.Errorf("%s = %q, want %q", key, got[key], want)
		}
	}
}

func TestBuildMetricsSecret(t *testing.T) {
	renewAt := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	secret := BuildMetricsSecret(newCluster(), []byte("CA"), certs.Pair{CertPEM: []byte("CERT"), KeyPEM: []byte("KEY")}, renewAt)
	if secret.Name != "db-metrics-client" || secret.Namespace != "ns" || secret.Type != corev1.SecretTypeTLS {
		t.Errorf("secret = %s/%s of type %s, want ns/db-metrics-client of type kubernetes.io/tls", secret.Namespace, secret.Name, secret.Type)
	}
	want := map[string][]byte{"ca.crt": []byte("CA"), "tls.crt": []byte("CERT"), "tls.key": []byte("KEY")}
	if diff := cmp.Diff(want, secret.Data); diff != "" {
		t.Errorf("data (-want +got):\n%s", diff)
	}
	if got := secret.Annotations[RenewAtAnnotation]; got != "2026-03-01T00:00:00Z" {
		t.Errorf("renew-at = %q", got)
	}
	if diff := cmp.Diff([]metav1.OwnerReference{wantOwnerReference()}, secret.OwnerReferences); diff != "" {
		t.Errorf("owner references (-want +got):\n%s", diff)
	}
}
