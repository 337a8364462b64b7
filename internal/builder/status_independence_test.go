package builder

import (
	"encoding/json"
	"testing"

	"sigs.k8s.io/randfill"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// The reconciler skips comparing a cluster's owned objects when nothing but its status changed
// since they were last found up to date (its own status patches carry that record over), which
// holds only while no builder of those objects reads the status.
func TestBuildersIgnoreStatus(t *testing.T) {
	built := func(c *pgv1.PostgresCluster) string {
		sts, err := BuildStatefulSet(c, testImages)
		if err != nil {
			t.Fatal(err)
		}
		objects := []any{sts, BuildConfigMap(c, agentapi.TLSPolicy{Required: true}), BuildServices(c), BuildPodDisruptionBudget(c), BuildPodMonitor(c),
			BuildInstanceServiceAccount(c), BuildInstanceRole(c), BuildInstanceRoleBinding(c)}
		data, err := json.Marshal(objects)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	plain := newCluster()
	want := built(plain)
	filler := randfill.NewWithSeed(1).NilChance(0.1).NumElements(1, 3)
	for range 20 {
		c := plain.DeepCopy()
		filler.Fill(&c.Status)
		if got := built(c); got != want {
			t.Fatalf("the owned objects depend on the status %+v", c.Status)
		}
	}
}
