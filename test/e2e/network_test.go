//go:build e2e

package e2e

import (
	"net"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// The suite runs on the node's network (localcluster exec), where every pod's traffic leaves
// through: that network must have no way off the machine.
var _ = Describe("The node's network", func() {
	It("has no route off the machine", func() {
		// Connecting a UDP socket only looks the route up; nothing is sent.
		for _, addr := range []string{"192.0.2.1:53", "203.0.113.1:53", "[2001:db8::1]:53"} {
			conn, err := net.Dial("udp", addr)
			if err == nil {
				_ = conn.Close()
			}
			Expect(err).To(MatchError(ContainSubstring("network is unreachable")), "route to %s", addr)
		}
	})

	It("reaches Services by their ClusterIP, through kube-proxy", func() {
		conn, err := net.Dial("tcp", "10.96.0.1:443") // the kubernetes Service
		Expect(err).NotTo(HaveOccurred())
		_ = conn.Close()
	})
})
