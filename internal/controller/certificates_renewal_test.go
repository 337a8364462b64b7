package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

func TestDueForRenewal(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	withRenewAt := func(at string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{pgbuilder.RenewAtAnnotation: at}}}
	}
	cluster := func(duration, renewBefore time.Duration) *pgv1.PostgresCluster {
		c := &pgv1.PostgresCluster{}
		if duration > 0 {
			c.Spec.Certificates = pgv1.CertificatesSpec{Duration: &metav1.Duration{Duration: duration},
				RenewBefore: &metav1.Duration{Duration: renewBefore}}
		}
		return c
	}
	tests := []struct {
		name   string
		c      *pgv1.PostgresCluster
		secret *corev1.Secret
		want   bool
	}{
		{name: "not yet", c: cluster(0, 0), secret: withRenewAt(now.Add(time.Hour).Format(time.RFC3339))},
		{name: "due", c: cluster(0, 0), secret: withRenewAt(now.Format(time.RFC3339)), want: true},
		{name: "overdue", c: cluster(0, 0), secret: withRenewAt(now.Add(-time.Hour).Format(time.RFC3339)), want: true},
		{name: "no annotation", c: cluster(0, 0), secret: &corev1.Secret{}, want: true},
		{name: "unreadable annotation", c: cluster(0, 0), secret: withRenewAt("soon"), want: true},
		{name: "issued for 90 days, now asked for 3 minutes", c: cluster(3*time.Minute, 2*time.Minute),
			secret: withRenewAt(now.Add(83 * 24 * time.Hour).Format(time.RFC3339)), want: true},
		{name: "issued as now asked", c: cluster(3*time.Minute, 2*time.Minute),
			secret: withRenewAt(now.Add(time.Minute).Format(time.RFC3339))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := dueForRenewal(tt.c, tt.secret, now); got != tt.want {
				t.Errorf("dueForRenewal = %v, want %v", got, tt.want)
			}
		})
	}
}
