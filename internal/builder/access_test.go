package builder

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// The agents' Role reaches one object: the cluster's primary Lease, to read and renew it.
func TestInstanceRoleAllowsOnlyTheLease(t *testing.T) {
	role := BuildInstanceRole(newCluster())
	if len(role.Rules) != 1 {
		t.Fatalf("rules %+v", role.Rules)
	}
	rule := role.Rules[0]
	if len(rule.Resources) != 1 || rule.Resources[0] != "leases" || len(rule.ResourceNames) != 1 ||
		rule.ResourceNames[0] != "db-primary" || len(rule.Verbs) != 2 || rule.Verbs[0] != "get" || rule.Verbs[1] != "update" {
		t.Errorf("rule %+v", rule)
	}
	binding := BuildInstanceRoleBinding(newCluster())
	if *binding.RoleRef.Name != *role.Name || *binding.Subjects[0].Name != InstanceAccessName(newCluster()) {
		t.Errorf("binding %+v", binding)
	}
}

func TestPrimaryLease(t *testing.T) {
	for _, tc := range []struct {
		name        string
		primary     string
		transitions int32
	}{
		{"a new cluster: its initial primary may initdb", "", 0},
		{"a cluster that had a primary: counted as granted once", "db-2", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster()
			c.Status = pgv1.PostgresClusterStatus{CurrentPrimary: tc.primary}
			lease := BuildPrimaryLease(c, "db-0", metav1.NowMicro())
			if lease.Name != "db-primary" || ptr.Deref(lease.Spec.HolderIdentity, "") != "db-0" ||
				ptr.Deref(lease.Spec.LeaseTransitions, -1) != tc.transitions || len(lease.OwnerReferences) != 1 {
				t.Errorf("lease %+v", lease)
			}
		})
	}
}
