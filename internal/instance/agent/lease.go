package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
)

// Lease is the cluster's primary Lease as the agent reads it: who may be the primary, and how
// often that was granted.
type Lease struct {
	Holder      string
	Transitions int32
	// Version is the resourceVersion read: a renewal succeeds only while it is current.
	Version string
	// object is what was read, to write it back under its resourceVersion.
	object *coordinationv1.Lease
}

// ErrLeaseConflict: the Lease changed since it was read (the operator granted it, most likely).
var ErrLeaseConflict = errors.New("the primary lease changed since it was read")

// LeaseStore reads and renews the primary Lease. Renew is a compare-and-swap: it fails with
// ErrLeaseConflict when the Lease is no longer the version read.
type LeaseStore interface {
	Get(ctx context.Context) (Lease, error)
	Renew(ctx context.Context, l Lease, holder string) (Lease, error)
}

// KubeLeases is the Lease in the API server, reached with the pod's ServiceAccount, whose Role
// allows get and update of this one Lease and nothing else.
type KubeLeases struct {
	Client    coordinationclient.LeasesGetter
	Namespace string
	Name      string
}

// NewKubeLeases uses the in-cluster configuration, with short timeouts: a renewal that cannot
// finish in time counts as failed.
func NewKubeLeases(namespace, name string) (*KubeLeases, error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("in-cluster config: %w", err)
	}
	cfg.Timeout = agentapi.LeaseRequestTimeout
	cfg.UserAgent = "pgpilot-agent"
	c, err := coordinationclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &KubeLeases{Client: c, Namespace: namespace, Name: name}, nil
}

func (k *KubeLeases) Get(ctx context.Context) (Lease, error) {
	obj, err := k.Client.Leases(k.Namespace).Get(ctx, k.Name, metav1.GetOptions{})
	if err != nil {
		return Lease{}, fmt.Errorf("get lease %s: %w", k.Name, err)
	}
	return leaseOf(obj), nil
}

func (k *KubeLeases) Renew(ctx context.Context, l Lease, holder string) (Lease, error) {
	if l.object == nil {
		return Lease{}, errors.New("renew lease: it was never read")
	}
	obj := l.object.DeepCopy()
	now := metav1.NewMicroTime(time.Now())
	obj.Spec.HolderIdentity = &holder
	obj.Spec.RenewTime = &now
	updated, err := k.Client.Leases(k.Namespace).Update(ctx, obj, metav1.UpdateOptions{})
	// A renewal the admission policy on the Lease refuses (pgpilot-primary-lease: the Lease is no
	// longer this pod's) means what a conflict means: read it again, and learn whose it is.
	if apierrors.IsConflict(err) || apierrors.IsForbidden(err) {
		return Lease{}, fmt.Errorf("%w (%v)", ErrLeaseConflict, err)
	}
	if err != nil {
		return Lease{}, fmt.Errorf("renew lease %s: %w", k.Name, err)
	}
	return leaseOf(updated), nil
}

func leaseOf(obj *coordinationv1.Lease) Lease {
	l := Lease{object: obj, Version: obj.ResourceVersion}
	if obj.Spec.HolderIdentity != nil {
		l.Holder = *obj.Spec.HolderIdentity
	}
	if obj.Spec.LeaseTransitions != nil {
		l.Transitions = *obj.Spec.LeaseTransitions
	}
	return l
}
