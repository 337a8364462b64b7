//go:build tools

// Package tools pins etcd for the test control plane (Debian's etcd-server is 3.4, too old).
package tools

import _ "go.etcd.io/etcd/server/v3"
