//go:build tools

// Package tools pins grpc_health_probe, which OLM's catalog pods run as their probes (the
// opm image carries it). Its own module: its gRPC is newer than the one OLM builds with.
package tools

import (
	_ "github.com/grpc-ecosystem/grpc-health-probe"
)
