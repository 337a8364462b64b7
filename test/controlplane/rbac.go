package controlplane

import (
	"context"
	"fmt"
	"os"

	rbacv1 "k8s.io/api/rbac/v1"
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
	}
	return cp.Kubeconfig(envtest.User{Name: user})
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
