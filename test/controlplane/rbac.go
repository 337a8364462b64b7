package controlplane

import (
	"context"
	"fmt"
	"os"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

// UserKubeconfig creates user and writes its kubeconfig, granting it the ClusterRole in
// clusterRoleFile cluster-wide and each Role in roleFiles within namespace. Running the
// operator this way proves the RBAC it ships with is enough, and no more is used.
func (cp *ControlPlane) UserKubeconfig(ctx context.Context, admin client.Client, user, clusterRoleFile, namespace string, roleFiles ...string) (string, error) {
	subject := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}
	clusterRole := &rbacv1.ClusterRole{}
	if err := decodeFile(clusterRoleFile, clusterRole); err != nil {
		return "", err
	}
	if err := admin.Create(ctx, clusterRole); err != nil {
		return "", fmt.Errorf("create ClusterRole %s: %w", clusterRole.Name, err)
	}
	binding := &rbacv1.ClusterRoleBinding{Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole.Name}}
	binding.Name = user + "-" + clusterRole.Name
	if err := admin.Create(ctx, binding); err != nil {
		return "", fmt.Errorf("create ClusterRoleBinding %s: %w", binding.Name, err)
	}
	granted := []grant{{rules: clusterRole.Rules}}
	for _, file := range roleFiles {
		role := &rbacv1.Role{}
		if err := decodeFile(file, role); err != nil {
			return "", err
		}
		role.Namespace = namespace
		if err := admin.Create(ctx, role); err != nil {
			return "", fmt.Errorf("create Role %s: %w", role.Name, err)
		}
		binding := &rbacv1.RoleBinding{Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}}
		binding.Name, binding.Namespace = user+"-"+role.Name, namespace
		if err := admin.Create(ctx, binding); err != nil {
			return "", fmt.Errorf("create RoleBinding %s: %w", binding.Name, err)
		}
		granted = append(granted, grant{namespace: namespace, rules: role.Rules})
	}
	if err := waitAuthorized(ctx, admin, user, namespace, granted); err != nil {
		return "", err
	}
	return cp.Kubeconfig(envtest.User{Name: user})
}

type grant struct {
	namespace string
	rules     []rbacv1.PolicyRule
}

// waitAuthorized returns once the authorizer allows user the first rule of every grant. The
// RBAC authorizer reads roles and bindings from informers, so a request made right after the
// Creates above can still be forbidden; a user started then would fail on its first call.
func waitAuthorized(ctx context.Context, admin client.Client, user, namespace string, grants []grant) error {
	for _, g := range grants {
		if len(g.rules) == 0 {
			continue
		}
		review := accessReview(user, namespace, g.rules[0])
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true,
			func(ctx context.Context) (bool, error) {
				attempt := review.DeepCopy()
				if err := admin.Create(ctx, attempt); err != nil {
					return false, err
				}
				return attempt.Status.Allowed, nil
			})
		if err != nil {
			return fmt.Errorf("wait for RBAC to allow %s %+v: %w", user, review.Spec, err)
		}
	}
	return nil
}

func accessReview(user, namespace string, rule rbacv1.PolicyRule) *authorizationv1.SubjectAccessReview {
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user}}
	first := func(values []string) string {
		if len(values) == 0 {
			return ""
		}
		return values[0]
	}
	if len(rule.NonResourceURLs) > 0 {
		review.Spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{
			Path: first(rule.NonResourceURLs), Verb: first(rule.Verbs)}
		return review
	}
	review.Spec.ResourceAttributes = &authorizationv1.ResourceAttributes{Namespace: namespace,
		Group: first(rule.APIGroups), Resource: first(rule.Resources), Verb: first(rule.Verbs),
		Name: first(rule.ResourceNames)}
	return review
}

func decodeFile(path string, into any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}
