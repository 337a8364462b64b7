//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The PostgreSQL image the operator deploys by default must keep the official postgres image's
// entrypoint contract, so that it can stand in for docker.io/library/postgres anywhere.
var _ = Describe("The default PostgreSQL image", func() {
	AfterEach(dumpOnFailure)

	It("initialises an empty PGDATA from POSTGRES_* and serves password logins, like the official image", func(ctx SpecContext) {
		deploy := &appsv1.Deployment{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: operatorDeployment}, deploy)).To(Succeed())
		var image string
		for _, env := range deploy.Spec.Template.Spec.Containers[0].Env {
			if env.Name == "RELATED_IMAGE_POSTGRES" {
				image = env.Value
			}
		}
		Expect(image).NotTo(BeEmpty(), "the operator has no RELATED_IMAGE_POSTGRES")

		ns := newNamespace(ctx, "e2e-image")
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "postgres", Namespace: ns},
			Spec: corev1.PodSpec{
				SecurityContext: &corev1.PodSecurityContext{
					RunAsUser: ptr.To[int64](999), RunAsGroup: ptr.To[int64](999), FSGroup: ptr.To[int64](999),
				},
				Containers: []corev1.Container{restrictedContainer(corev1.Container{
					Name:  "postgres",
					Image: image,
					Args:  []string{"postgres", "-c", "max_connections=50"},
					Env: []corev1.EnvVar{
						{Name: "PGDATA", Value: "/var/lib/postgresql/data/pgdata"},
						{Name: "POSTGRES_USER", Value: "owner"},
						{Name: "POSTGRES_PASSWORD", Value: "e2e-secret"},
						{Name: "POSTGRES_DB", Value: "appdb"},
					},
					// Over TCP, not the socket: the entrypoint's initdb phase runs a socket-only
					// temporary server that a socket probe would call ready (CI saw the login
					// job refused right after such a false Ready).
					ReadinessProbe: &corev1.Probe{
						ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
							Command: []string{"pg_isready", "-q", "-h", "127.0.0.1", "-p", "5432"},
						}},
						PeriodSeconds: 2,
					},
					VolumeMounts: []corev1.VolumeMount{
						{Name: "data", MountPath: "/var/lib/postgresql/data"},
						{Name: "run", MountPath: "/var/run/postgresql"},
					},
				})},
				Volumes: []corev1.Volume{
					{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					{Name: "run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				},
			},
		}
		Expect(k8s.Create(ctx, pod)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
			g.Expect(podReady(pod)).To(BeTrue(), "pod postgres is not Ready")
		}).Should(Succeed())

		logs := runJob(ctx, ns, "login", corev1.PodSpec{
			Containers: []corev1.Container{restrictedContainer(corev1.Container{
				Name:    "psql",
				Image:   image,
				Command: []string{"psql", "-h", pod.Status.PodIP, "-U", "owner", "-d", "appdb", "-tAc", "select current_user || '@' || current_database() || ' ' || current_setting('max_connections')"},
				Env:     []corev1.EnvVar{{Name: "PGPASSWORD", Value: "e2e-secret"}},
			})},
		})
		Expect(logs).To(ContainSubstring("owner@appdb 50"))
	})
})
