//go:build tools

// Package tools pins rancher's local-path-provisioner, the local cluster's default
// StorageClass. Its main package is the module root, so a blank import is enough for
// `go build github.com/rancher/local-path-provisioner` to resolve from this module.
package tools

import _ "github.com/rancher/local-path-provisioner"
