// Command httpcheck is a tiny HTTP(S) client for end-to-end tests that must look at a
// service from inside the cluster, the way Prometheus would scrape it. It fetches one URL,
// optionally with a ServiceAccount bearer token, prints the status, and exits 0 only when
// the status is the expected one.
//
//	httpcheck -url https://svc.ns.svc:8443/metrics -token-file /var/run/secrets/.../token -expect 200
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	url := flag.String("url", "", "URL to GET")
	tokenFile := flag.String("token-file", "", "file holding a bearer token; empty sends none")
	expect := flag.Int("expect", http.StatusOK, "status code that counts as success")
	attempts := flag.Int("attempts", 30, "tries before giving up (the server may still be starting)")
	interval := flag.Duration("interval", 2*time.Second, "pause between tries")
	flag.Parse()
	if *url == "" {
		fmt.Fprintln(os.Stderr, "httpcheck: -url is required")
		os.Exit(2)
	}
	header := http.Header{}
	if *tokenFile != "" {
		token, err := os.ReadFile(*tokenFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "httpcheck:", err)
			os.Exit(2)
		}
		header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	}
	// The operator's metrics server uses a self-signed certificate unless one is mounted;
	// this checks authentication and authorization, not the serving certificate.
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec
	}
	var last string
	for i := 1; i <= *attempts; i++ {
		code, err := get(client, *url, header)
		switch {
		case err != nil:
			last = err.Error()
		case code == *expect:
			fmt.Printf("GET %s: %d (expected %d)\n", *url, code, *expect)
			return
		default:
			last = fmt.Sprintf("status %d", code)
		}
		fmt.Printf("attempt %d: GET %s: %s\n", i, *url, last)
		time.Sleep(*interval)
	}
	fmt.Printf("GET %s: gave up after %d attempts, last %s, expected %d\n", *url, *attempts, last, *expect)
	os.Exit(1)
}

func get(client *http.Client, url string, header http.Header) (int, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header = header
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}
