package builder

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

func roleSecret(name, version, username, password string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: version},
		Data: map[string][]byte{corev1.BasicAuthUsernameKey: []byte(username), corev1.BasicAuthPasswordKey: []byte(password)}}
}

func TestBuildCatalogRequestRoles(t *testing.T) {
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
	req, problems := BuildCatalogRequest(c, secrets, nil)
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
	same, _ := BuildCatalogRequest(c, map[string]*corev1.Secret{"reader-secret": roleSecret("reader-secret", "7", "reader", "other")}, nil)
	rotated, _ := BuildCatalogRequest(c, map[string]*corev1.Secret{"reader-secret": roleSecret("reader-secret", "8", "reader", "pw")}, nil)
	goneSecret, _ := BuildCatalogRequest(c, nil, nil)
	changed := c.DeepCopy()
	changed.Spec.Roles[1].CreateDB = true
	redeclared, _ := BuildCatalogRequest(changed, secrets, nil)
	if same.Fingerprint != req.Fingerprint {
		t.Errorf("the fingerprint moved with the password alone")
	}
	for name, other := range map[string]agentapi.CatalogRequest{"rotated": rotated, "gone secret": goneSecret, "redeclared": redeclared} {
		if other.Fingerprint == req.Fingerprint {
			t.Errorf("%s: the fingerprint did not move", name)
		}
	}
	if CatalogSpecHash(changed, nil) == CatalogSpecHash(c, nil) {
		t.Errorf("CatalogSpecHash did not move with the spec")
	}
	if got := RoleSecretNames(c); strings.Join(got, ",") != "missing,reader-secret" {
		t.Errorf("RoleSecretNames = %v", got)
	}
}

func testDatabase(name, dbName string, created time.Time, policy pgv1.ReclaimPolicy) pgv1.Database {
	return pgv1.Database{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), Generation: 1, CreationTimestamp: metav1.NewTime(created)},
		Spec: pgv1.DatabaseSpec{Name: dbName, Owner: "shop", ReclaimPolicy: policy}}
}

// The oldest Database naming a database declares it; a retained one that is going is no longer
// declared, one going with reclaimPolicy delete is, absent.
func TestDeclaredDatabases(t *testing.T) {
	now := time.Now()
	going := testDatabase("old-going", "old", now.Add(-time.Hour), pgv1.ReclaimRetain)
	going.DeletionTimestamp = &metav1.Time{Time: now}
	dropped := testDatabase("dropped", "dropped", now.Add(-time.Hour), pgv1.ReclaimDelete)
	dropped.DeletionTimestamp = &metav1.Time{Time: now}
	declared, refused := DeclaredDatabases([]pgv1.Database{
		testDatabase("shop-copy", "shop", now, pgv1.ReclaimRetain),
		testDatabase("shop", "shop", now.Add(-time.Minute), pgv1.ReclaimRetain),
		going, dropped,
	})
	var names []string
	for _, db := range declared {
		names = append(names, db.Name)
	}
	if !slices.Equal(names, []string{"dropped", "shop"}) {
		t.Errorf("declared %v", names)
	}
	if len(refused) != 1 || !strings.Contains(refused["shop-copy"], "declared by the older Database shop") {
		t.Errorf("refused %v", refused)
	}
	c := &pgv1.PostgresCluster{}
	c.Spec.Bootstrap.InitDB.Database = "app"
	req, _ := BuildCatalogRequest(c, nil, declared)
	if !req.Databases[0].Absent || req.Databases[1].Absent || req.Databases[1].ConnectionLimit != -1 || !slices.Equal(req.ForbiddenDatabases, []string{"app"}) {
		t.Errorf("request %+v", req)
	}
}

// A schema without an owner is the database's; the fingerprint moves with a Database's spec and
// the spec hash with its generation and deletion.
func TestCatalogRequestOfADatabase(t *testing.T) {
	db := testDatabase("shop", "shop", time.Now(), pgv1.ReclaimRetain)
	db.Spec.Schemas = []pgv1.DatabaseSchemaSpec{{Name: "sales"}, {Name: "etl", Owner: "loader", Ensure: pgv1.RoleAbsent}}
	db.Spec.Extensions = []pgv1.DatabaseExtensionSpec{{Name: "hstore", Version: "1.8", Schema: "sales"}}
	c := &pgv1.PostgresCluster{}
	req, _ := BuildCatalogRequest(c, nil, []*pgv1.Database{&db})
	got := req.Databases[0]
	if got.Schemas[0].Owner != "shop" || got.Schemas[1].Owner != "loader" || !got.Schemas[1].Absent ||
		got.Extensions[0] != (agentapi.ManagedExtension{Name: "hstore", Version: "1.8", Schema: "sales"}) {
		t.Errorf("database %+v", got)
	}
	hash := CatalogSpecHash(c, []pgv1.Database{db})
	changed := db.DeepCopy()
	changed.Spec.Extensions[0].Version = "1.7"
	again, _ := BuildCatalogRequest(c, nil, []*pgv1.Database{changed})
	if again.Fingerprint == req.Fingerprint {
		t.Error("the fingerprint did not move with the Database")
	}
	changed.Generation = 2
	if CatalogSpecHash(c, []pgv1.Database{*changed}) == hash {
		t.Error("the spec hash did not move with the Database's generation")
	}
}
