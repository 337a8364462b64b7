package builder

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

func roleSecret(name, version, username, password string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: version},
		Data: map[string][]byte{corev1.BasicAuthUsernameKey: []byte(username), corev1.BasicAuthPasswordKey: []byte(password)}}
}

func TestBuildRolesRequest(t *testing.T) {
	until := metav1.NewTime(time.Date(2027, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600)))
	c := &pgv1.PostgresCluster{Spec: pgv1.PostgresClusterSpec{
		Bootstrap: pgv1.BootstrapSpec{InitDB: pgv1.InitDBSpec{Owner: "app"}},
		Roles: []pgv1.ManagedRoleSpec{
			{Name: "reader", Login: true, PasswordSecret: &corev1.LocalObjectReference{Name: "reader-secret"}, InRoles: []string{"pg_read_all_data"}, ValidUntil: &until},
			{Name: "group", Inherit: ptr.To(false), ConnectionLimit: ptr.To(int32(4))},
			{Name: "gone", Ensure: pgv1.RoleAbsent},
			{Name: "lost", Login: true, PasswordSecret: &corev1.LocalObjectReference{Name: "missing"}},
			{Name: "mixed", Login: true, PasswordSecret: &corev1.LocalObjectReference{Name: "reader-secret"}},
			{Name: "locked", DisablePassword: true},
		},
	}}
	secrets := map[string]*corev1.Secret{"reader-secret": roleSecret("reader-secret", "7", "reader", "pw")}
	req, problems := BuildRolesRequest(c, secrets)
	if len(req.Roles) != 6 || req.Forbidden[0] != "app" {
		t.Fatalf("request %+v", req)
	}
	reader, group, gone, lost, mixed, locked := req.Roles[0], req.Roles[1], req.Roles[2], req.Roles[3], req.Roles[4], req.Roles[5]
	if reader.Password == nil || *reader.Password != "pw" || !reader.Inherit || reader.ConnectionLimit != -1 || !reader.ValidUntil.Equal(until.Time) || reader.ValidUntil.Location() != time.UTC {
		t.Errorf("reader %+v", reader)
	}
	if group.Inherit || group.ConnectionLimit != 4 || group.Password != nil || group.Login {
		t.Errorf("group %+v", group)
	}
	if !gone.Absent || !locked.DisablePassword {
		t.Errorf("gone %+v, locked %+v", gone, locked)
	}
	if lost.Password != nil || !strings.Contains(problems["lost"], `"missing" does not exist`) {
		t.Errorf("lost %+v: %q", lost, problems["lost"])
	}
	if mixed.Password != nil || !strings.Contains(problems["mixed"], `for the role "reader"`) {
		t.Errorf("mixed %+v: %q", mixed, problems["mixed"])
	}
	if strings.Contains(req.Fingerprint, "pw") || len(problems) != 2 {
		t.Errorf("fingerprint %q, problems %v", req.Fingerprint, problems)
	}

	// The fingerprint follows the declarations and the Secrets' versions, not the passwords.
	same, _ := BuildRolesRequest(c, map[string]*corev1.Secret{"reader-secret": roleSecret("reader-secret", "7", "reader", "other")})
	rotated, _ := BuildRolesRequest(c, map[string]*corev1.Secret{"reader-secret": roleSecret("reader-secret", "8", "reader", "pw")})
	goneSecret, _ := BuildRolesRequest(c, nil)
	changed := c.DeepCopy()
	changed.Spec.Roles[1].CreateDB = true
	redeclared, _ := BuildRolesRequest(changed, secrets)
	if same.Fingerprint != req.Fingerprint {
		t.Errorf("the fingerprint moved with the password alone")
	}
	for name, other := range map[string]agentapi.CatalogRequest{"rotated": rotated, "gone secret": goneSecret, "redeclared": redeclared} {
		if other.Fingerprint == req.Fingerprint {
			t.Errorf("%s: the fingerprint did not move", name)
		}
	}
	if RolesSpecHash(changed) == RolesSpecHash(c) {
		t.Errorf("RolesSpecHash did not move with the spec")
	}
	if got := RoleSecretNames(c); strings.Join(got, ",") != "missing,reader-secret" {
		t.Errorf("RoleSecretNames = %v", got)
	}
}
