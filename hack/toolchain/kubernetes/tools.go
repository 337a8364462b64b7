//go:build tools

// Package tools pins the Kubernetes components pgpilot's tests and local cluster run.
// k8s.io/kubernetes cannot be `go install`ed (its go.mod replaces staging modules with
// ./staging paths), so this wrapper module restates those replaces against published versions.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"

	// The node components of hack/localcluster (hack/toolchain.sh kubernetes-node).
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
