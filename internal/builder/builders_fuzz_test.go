package builder

import (
	"encoding/json"
	"testing"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// FuzzBuilders feeds every builder the specs a client could send: any JSON that decodes into
// a PostgresClusterSpec. The API server rejects much of it, but a builder must never panic on
// a spec, since one panic stops reconciling every cluster of the operator.
func FuzzBuilders(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"instances":3,"storage":{"size":"1Gi","storageClassName":"fast","reclaimPolicy":"Delete"}}`,
		`{"instances":0,"storage":{"size":"-1"},"image":""}`,
		`{"instances":-2147483648,"storage":{"size":"1e308"}}`,
		`{"resources":{"limits":{"cpu":"1e-9","memory":"9Ei"},"requests":{"":"0"}}}`,
		`{"bootstrap":{"initdb":{"database":"","owner":"","secret":{"name":""}}}}`,
		`{"scheduling":{"nodeSelector":{"":""},"tolerations":[{}],"topologySpreadConstraints":[{}],"affinity":{}}}`,
		`{"scheduling":{"affinity":{"podAntiAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[{"labelSelector":{"matchExpressions":[{"key":"a","operator":"In"}]}}]}}}}`,
		`{"postgresql":{"parameters":{"a = 1\nb":"\\'\n#"},"pgHBA":["host all all all trust \\","a\u0000b"]}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, spec []byte) {
		c := newCluster()
		c.Spec = pgv1.PostgresClusterSpec{}
		if err := json.Unmarshal(spec, &c.Spec); err != nil {
			t.Skip()
		}
		if _, err := BuildStatefulSet(c, testImages); err != nil {
			t.Logf("BuildStatefulSet: %v", err)
		}
		BuildConfigMap(c, agentapi.TLSPolicy{Required: true})
		BuildServices(c)
		BuildPodDisruptionBudget(c)
		for _, cred := range GeneratedCredentials(c) {
			BuildCredentialSecret(c, cred, "password")
		}
		AppSecretName(c)
	})
}
