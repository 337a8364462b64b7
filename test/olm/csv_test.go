package olm_test

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"

	"github.com/pgpilot/pgpilot-operator/internal/controller"
	pgversion "github.com/pgpilot/pgpilot-operator/internal/version"
)

// The CSV carries everything OperatorHub shows and OLM needs, and nothing it should not.
func TestCSVIsComplete(t *testing.T) {
	csv := bundleCSV(t)
	version := pgversion.Version
	operatorImage := "ghcr.io/pgpilot/pgpilot-operator:v" + version

	t.Run("metadata", func(t *testing.T) {
		if csv.Name != "pgpilot-operator.v"+version || csv.Spec.Version.String() != version {
			t.Errorf("CSV %s version %s, want pgpilot-operator.v%s", csv.Name, csv.Spec.Version.String(), version)
		}
		a := csv.Annotations
		wantAnnotations := map[string]string{
			"capabilities":   "Deep Insights", // failover, backups and restores, metrics, alerts, dashboard, JSON logs
			"categories":     "Database",
			"containerImage": operatorImage,
			"createdAt":      makeVar(t, "BUNDLE_CREATED_AT"),
			"repository":     "https://github.com/pgpilot/pgpilot-operator",
		}
		for k, want := range wantAnnotations {
			if a[k] != want {
				t.Errorf("annotation %s = %q, want %q", k, a[k], want)
			}
		}
		if _, err := time.Parse(time.RFC3339, a["createdAt"]); err != nil {
			t.Errorf("createdAt: %v", err)
		}
		if a["description"] == "" {
			t.Error("no short description annotation")
		}
		if csv.Spec.DisplayName == "" || len(csv.Spec.Keywords) == 0 || len(csv.Spec.Maintainers) == 0 ||
			csv.Spec.Provider.Name == "" || len(csv.Spec.Links) == 0 {
			t.Errorf("displayName, keywords, maintainers, provider and links must be set: %+v", csv.Spec)
		}
		for _, m := range csv.Spec.Maintainers {
			if m.Name == "" || !strings.Contains(m.Email, "@") {
				t.Errorf("maintainer %+v needs a name and an email", m)
			}
		}
		for _, l := range csv.Spec.Links {
			if l.Name == "" || !strings.HasPrefix(l.URL, "https://") {
				t.Errorf("link %+v needs a name and an https URL", l)
			}
		}
		if csv.Spec.Maturity != "alpha" || csv.Spec.MinKubeVersion != "1.30.0" {
			t.Errorf("maturity %q minKubeVersion %q, want alpha and 1.30.0", csv.Spec.Maturity, csv.Spec.MinKubeVersion)
		}
		for _, section := range []string{"### What pgpilot does today", "### Prerequisites", "### Quick start",
			"kind: PostgresCluster"} {
			if !strings.Contains(csv.Spec.Description, section) {
				t.Errorf("the description has no %q", section)
			}
		}
	})

	t.Run("the description's claims are what the operator does", func(t *testing.T) {
		checkDescriptionClaims(t, csv)
	})

	t.Run("icon", func(t *testing.T) {
		svg, err := os.ReadFile(repoPath("config", "manifests", "bases", "pgpilot-icon.svg"))
		if err != nil {
			t.Fatal(err)
		}
		if len(csv.Spec.Icon) != 1 || csv.Spec.Icon[0].MediaType != "image/svg+xml" ||
			csv.Spec.Icon[0].Data != base64.StdEncoding.EncodeToString(svg) {
			t.Error("the CSV icon must be config/manifests/bases/pgpilot-icon.svg, base64, image/svg+xml " +
				"(after editing the SVG, update base64data in the CSV base)")
		}
	})

	t.Run("alm-examples are the samples", func(t *testing.T) {
		var examples []map[string]any
		if err := json.Unmarshal([]byte(csv.Annotations["alm-examples"]), &examples); err != nil {
			t.Fatal(err)
		}
		samples := samplesOf(t)
		if len(examples) != len(samples) {
			t.Fatalf("alm-examples %v, want the samples %v", examples, samples)
		}
		for i := range samples {
			if !equality.Semantic.DeepEqual(examples[i], samples[i]) {
				t.Errorf("alm-examples[%d] %v, want the sample %v", i, examples[i], samples[i])
			}
		}
	})

	t.Run("install modes", func(t *testing.T) {
		want := map[operatorsv1alpha1.InstallModeType]bool{
			operatorsv1alpha1.InstallModeTypeOwnNamespace:    true,
			operatorsv1alpha1.InstallModeTypeSingleNamespace: true,
			operatorsv1alpha1.InstallModeTypeMultiNamespace:  true,
			operatorsv1alpha1.InstallModeTypeAllNamespaces:   true,
		}
		got := map[operatorsv1alpha1.InstallModeType]bool{}
		for _, m := range csv.Spec.InstallModes {
			got[m.Type] = m.Supported
		}
		if !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("install modes %v, want %v", got, want)
		}
	})

	deployments := csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs
	if len(deployments) != 1 {
		t.Fatalf("%d deployments, want 1", len(deployments))
	}
	manager := container(t, deployments[0].Spec, "manager")

	t.Run("deployment", func(t *testing.T) {
		if manager.Image != operatorImage {
			t.Errorf("manager image %s, want %s (IMG)", manager.Image, operatorImage)
		}
		for _, arg := range []string{"--leader-elect", "--metrics-bind-address=:8443", "--health-probe-bind-address=:8081"} {
			if !slices.Contains(manager.Args, arg) {
				t.Errorf("manager args %v lack %s", manager.Args, arg)
			}
		}
		if slices.Contains(manager.Args, "--metrics-secure=false") {
			t.Error("metrics must stay HTTPS with authentication and authorization")
		}
		for _, major := range controller.SupportedPostgresMajors {
			want := fmt.Sprintf("ghcr.io/pgpilot/postgresql:%d", major)
			if env := envVar(manager, controller.PostgresImageVariable(major)); env == nil || env.Value != want {
				t.Errorf("%s = %+v, want pgpilot's image %s", controller.PostgresImageVariable(major), env, want)
			}
		}
		if env := envVar(manager, "RELATED_IMAGE_AGENT"); env == nil || env.Value != manager.Image {
			t.Errorf("RELATED_IMAGE_AGENT = %+v, want the manager's image", env)
		}
		if manager.Resources.Requests.Cpu().IsZero() || manager.Resources.Requests.Memory().IsZero() {
			t.Error("the manager needs resource requests")
		}
		sc := deployments[0].Spec.Template.Spec.SecurityContext
		if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Error("the manager pod must run as non-root")
		}
	})

	t.Run("related images", func(t *testing.T) {
		want := []string{manager.Image}
		for _, e := range manager.Env {
			if strings.HasPrefix(e.Name, "RELATED_IMAGE_") && !slices.Contains(want, e.Value) {
				want = append(want, e.Value)
			}
		}
		var got []string
		for _, ri := range csv.Spec.RelatedImages {
			if ri.Name == "" {
				t.Errorf("related image %s has no name", ri.Image)
			}
			got = append(got, ri.Image)
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("relatedImages %v, want every image the operator runs or deploys: %v", got, want)
		}
	})

	t.Run("permissions are the generated RBAC, not wider", func(t *testing.T) {
		strategy := csv.Spec.InstallStrategy.StrategySpec
		sa := deployments[0].Spec.Template.Spec.ServiceAccountName
		clusterRules := rulesOf(t, strategy.ClusterPermissions, sa)
		wantCluster := append(rbacRules(t, "manifests/rbac/cluster_role.yaml"), rbacRules(t, "rbac/metrics_auth_role.yaml")...)
		if !equality.Semantic.DeepEqual(clusterRules, wantCluster) {
			t.Errorf("clusterPermissions of %s:\n%v\nwant config/manifests/rbac/cluster_role.yaml + metrics_auth_role.yaml:\n%v", sa, clusterRules, wantCluster)
		}
		namespacedManager := rbacRules(t, "manifests/rbac/role.yaml")
		want := append(rbacRules(t, "rbac/leader_election_role.yaml"), namespacedManager...)
		if rules := rulesOf(t, strategy.Permissions, sa); !equality.Semantic.DeepEqual(rules, want) {
			t.Errorf("permissions of %s:\n%v\nwant config/rbac/leader_election_role.yaml + config/manifests/rbac/role.yaml:\n%v", sa, rules, want)
		}
		// The split loses and adds nothing of the manager's rules.
		split := append(slices.Clone(namespacedManager), rbacRules(t, "manifests/rbac/cluster_role.yaml")...)
		if got, want := ruleStrings(split), ruleStrings(rbacRules(t, "rbac/role.yaml")); !slices.Equal(got, want) {
			t.Errorf("the bundle's manager rules %v, want config/rbac/role.yaml's %v", got, want)
		}
		// A single-namespace install must not read Secrets, or touch pods, anywhere else.
		for _, r := range clusterRules {
			for _, resource := range r.Resources {
				if !slices.Contains([]string{"validatingadmissionpolicies", "validatingadmissionpolicybindings", "tokenreviews", "subjectaccessreviews"}, resource) {
					t.Errorf("clusterPermissions grant %s cluster-wide; namespaced rules belong in permissions", resource)
				}
			}
		}
		for _, r := range append(clusterRules, rulesOf(t, strategy.Permissions, sa)...) {
			if slices.Contains(r.Verbs, "*") || slices.Contains(r.Resources, "*") || slices.Contains(r.APIGroups, "*") {
				t.Errorf("wildcard rule %+v", r)
			}
		}
	})

	t.Run("descriptors", func(t *testing.T) {
		kinds := map[string]operatorsv1alpha1.CRDDescription{}
		for _, owned := range csv.Spec.CustomResourceDefinitions.Owned {
			kinds[owned.Kind] = owned
		}
		if len(kinds) != 4 {
			t.Fatalf("owned CRDs %+v, want PostgresCluster, Backup, ScheduledBackup and Database", csv.Spec.CustomResourceDefinitions.Owned)
		}
		for _, kind := range []string{"Backup", "ScheduledBackup", "Database"} {
			if owned := kinds[kind]; owned.DisplayName == "" || len(owned.SpecDescriptors) == 0 || len(owned.StatusDescriptors) == 0 {
				t.Errorf("%s needs a display name and descriptors: %+v", kind, owned)
			}
		}
		owned := kinds["PostgresCluster"]
		if owned.DisplayName == "" || len(owned.Resources) == 0 {
			t.Errorf("PostgresCluster needs a display name and the resources it creates: %+v", owned)
		}
		spec := map[string][]string{}
		for _, d := range owned.SpecDescriptors {
			spec[d.Path] = d.XDescriptors
		}
		status := map[string][]string{}
		for _, d := range owned.StatusDescriptors {
			status[d.Path] = d.XDescriptors
		}
		const ui, k8s = "urn:alm:descriptor:com.tectonic.ui:", "urn:alm:descriptor:io.kubernetes:"
		for path, x := range map[string]string{
			"instances":                 ui + "podCount",
			"resources":                 ui + "resourceRequirements",
			"bootstrap.initdb.secret":   k8s + "Secret",
			"storage.storageClassName":  k8s + "StorageClass",
			"storage.size":              ui + "text",
			"scheduling.affinity":       ui + "advanced",
			"scheduling.tolerations":    ui + "advanced",
			"scheduling.nodeSelector":   ui + "advanced",
			"postgresql.parameters":     ui + "advanced",
			"bootstrap.initdb.database": ui + "text",
		} {
			if !slices.Contains(spec[path], x) {
				t.Errorf("spec descriptor %s has %v, want %s", path, spec[path], x)
			}
		}
		for path, x := range map[string]string{
			"conditions":     "urn:alm:descriptor:io.kubernetes.conditions",
			"phase":          "urn:alm:descriptor:io.kubernetes.phase",
			"readyInstances": "urn:alm:descriptor:text",
			"currentPrimary": k8s + "Pod",
		} {
			if !slices.Contains(status[path], x) {
				t.Errorf("status descriptor %s has %v, want %s", path, status[path], x)
			}
		}
	})
}

func container(t *testing.T, spec appsv1.DeploymentSpec, name string) *corev1.Container {
	t.Helper()
	for i := range spec.Template.Spec.Containers {
		if spec.Template.Spec.Containers[i].Name == name {
			return &spec.Template.Spec.Containers[i]
		}
	}
	t.Fatalf("no container %s", name)
	return nil
}

func envVar(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func rulesOf(t *testing.T, perms []operatorsv1alpha1.StrategyDeploymentPermissions, sa string) []rbacv1.PolicyRule {
	t.Helper()
	var rules []rbacv1.PolicyRule
	for _, p := range perms {
		if p.ServiceAccountName != sa {
			t.Errorf("permissions for unexpected service account %s", p.ServiceAccountName)
			continue
		}
		rules = append(rules, p.Rules...)
	}
	return rules
}

// rbacRules reads the rules of a (Cluster)Role in config/rbac.
// ruleStrings are rules as sorted strings, to compare sets of rules in any order.
func ruleStrings(rules []rbacv1.PolicyRule) []string {
	out := make([]string, 0, len(rules))
	for _, r := range rules {
		out = append(out, r.String())
	}
	slices.Sort(out)
	return out
}

// rbacRules reads the rules of a Role or ClusterRole file under config/.
func rbacRules(t *testing.T, file string) []rbacv1.PolicyRule {
	t.Helper()
	data, err := os.ReadFile(repoPath("config", file))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(data, &role); err != nil {
		t.Fatal(err)
	}
	return role.Rules
}

// WATCH_NAMESPACE comes from the olm.targetNamespaces annotation OLM puts on the pod template:
// "" for AllNamespaces, "ns" or "ns1,ns2" otherwise. Outside OLM the annotation is absent; the
// downward API resolves a missing annotation to "" (kubelet: fieldpath.ExtractFieldPathAsString
// returns GetAnnotations()[key]), which the manager reads as "every namespace".
func TestWatchNamespaceFollowsTheOperatorGroup(t *testing.T) {
	const ref = "metadata.annotations['olm.targetNamespaces']"
	csv := bundleCSV(t)
	for _, d := range csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs {
		env := envVar(container(t, d.Spec, "manager"), "WATCH_NAMESPACE")
		if env == nil || env.ValueFrom == nil || env.ValueFrom.FieldRef == nil || env.ValueFrom.FieldRef.FieldPath != ref {
			t.Errorf("CSV deployment %s: WATCH_NAMESPACE = %+v, want the downward API field %s", d.Name, env, ref)
		}
	}
	data, err := os.ReadFile(repoPath("config", "manager", "manager.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "fieldPath: "+ref) {
		t.Errorf("config/manager/manager.yaml must take WATCH_NAMESPACE from %s too (make deploy)", ref)
	}
	for value, want := range map[string][]string{
		"":          nil, // AllNamespaces, or no OLM
		"team-a":    {"team-a"},
		"a,b":       {"a", "b"},
		"a, b,":     {"a", "b"},
		" ":         nil,
		"ns1,ns2,c": {"ns1", "ns2", "c"},
	} {
		got := controller.ParseWatchNamespaces(value)
		if !slices.Equal(got, want) {
			t.Errorf("ParseWatchNamespaces(%q) = %q, want %q", value, got, want)
		}
		if opts := controller.CacheOptions(got, false); (len(opts.DefaultNamespaces) == 0) != (len(want) == 0) {
			t.Errorf("WATCH_NAMESPACE=%q: cache namespaces %v, want %v (none = all namespaces)", value, opts.DefaultNamespaces, want)
		}
	}
}

// samplesOf reads the samples config/samples' kustomization lists, ordered as operator-sdk
// orders alm-examples (by kind, then name).
func samplesOf(t *testing.T) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(repoPath("config", "samples", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var kustomization struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &kustomization); err != nil {
		t.Fatal(err)
	}
	var samples []map[string]any
	for _, file := range kustomization.Resources {
		data, err := os.ReadFile(repoPath("config", "samples", file))
		if err != nil {
			t.Fatal(err)
		}
		var sample map[string]any
		if err := yaml.Unmarshal(data, &sample); err != nil {
			t.Fatal(err)
		}
		samples = append(samples, sample)
	}
	slices.SortFunc(samples, func(a, b map[string]any) int {
		return cmp.Or(cmp.Compare(fmt.Sprint(a["kind"]), fmt.Sprint(b["kind"])),
			cmp.Compare(fmt.Sprint(a["metadata"].(map[string]any)["name"]), fmt.Sprint(b["metadata"].(map[string]any)["name"])))
	})
	return samples
}
