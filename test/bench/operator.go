package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/pprof/profile"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat on Linux.
const clockTicks = 100

// operator is the manager binary running out of cluster as its own process and identity.
type operator struct {
	binary, kubeconfig, logPath string
	metricsAddr, pprofAddr      string
	flags                       []string
	cmd                         *exec.Cmd
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String(), nil
}

// start runs the manager with leader election on, as deployed, and plain-HTTP metrics on
// loopback so the benchmark can read the Go heap.
func (o *operator) start(ctx context.Context) error {
	var err error
	if o.metricsAddr, err = freeAddr(); err != nil {
		return err
	}
	probeAddr, err := freeAddr()
	if err != nil {
		return err
	}
	if o.pprofAddr, err = freeAddr(); err != nil {
		return err
	}
	logFile, err := os.OpenFile(o.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	o.cmd = exec.Command(o.binary, append([]string{
		"--leader-elect", "--leader-election-namespace=default",
		"--metrics-bind-address=" + o.metricsAddr, "--metrics-secure=false",
		"--health-probe-bind-address=" + probeAddr, "--pprof-bind-address=" + o.pprofAddr}, o.flags...)...)
	o.cmd.Env = append(os.Environ(), "KUBECONFIG="+o.kubeconfig, "RELATED_IMAGE_POSTGRES=postgres:15", "RELATED_IMAGE_AGENT=pgpilot-operator:bench")
	o.cmd.Stdout, o.cmd.Stderr = logFile, logFile
	o.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := o.cmd.Start(); err != nil {
		return fmt.Errorf("start manager: %w", err)
	}
	return waitFor(ctx, time.Minute, func() bool {
		resp, err := http.Get("http://" + probeAddr + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func (o *operator) stop() {
	if o.cmd == nil || o.cmd.Process == nil {
		return
	}
	_ = o.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = o.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = o.cmd.Process.Kill()
		<-done
	}
	o.cmd = nil
}

// cpuSeconds is the CPU time the manager process has used so far.
func (o *operator) cpuSeconds() (float64, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(o.cmd.Process.Pid), "stat"))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may contain spaces) start at state, field 3.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, err1 := strconv.ParseFloat(fields[11], 64)
	stime, err2 := strconv.ParseFloat(fields[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc stat: %v %v", err1, err2)
	}
	return (utime + stime) / clockTicks, nil
}

// memory samples the manager's resident set and Go heap a few times and keeps the medians,
// which the garbage collector's rhythm would otherwise make noisy.
func (o *operator) memory(ctx context.Context, samples int) (rssMiB, heapMiB float64, err error) {
	var rss, heap []float64
	for i := range samples {
		if i > 0 {
			select {
			case <-ctx.Done():
				return 0, 0, ctx.Err()
			case <-time.After(2 * time.Second):
			}
		}
		r, err := o.rssMiB()
		if err != nil {
			return 0, 0, err
		}
		h, err := o.metric("go_memstats_heap_inuse_bytes")
		if err != nil {
			return 0, 0, err
		}
		rss, heap = append(rss, r), append(heap, h/(1<<20))
	}
	return median(rss), median(heap), nil
}

func (o *operator) rssMiB() (float64, error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(o.cmd.Process.Pid), "status"))
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		if rest, ok := strings.CutPrefix(scanner.Text(), "VmRSS:"); ok {
			kib, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return kib / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc status")
}

// metric reads one unlabelled gauge from the manager's Prometheus endpoint.
func (o *operator) metric(name string) (float64, error) {
	return o.metricSum(name + " ")
}

// metricSum adds up the samples of the manager's metrics whose line starts with prefix (a name
// and the start of its labels).
func (o *operator) metricSum(prefix string) (float64, error) {
	resp, err := http.Get("http://" + o.metricsAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	scanner := bufio.NewScanner(resp.Body)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	sum, found := 0.0, false
	for scanner.Scan() {
		line := scanner.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		value, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", line, err)
		}
		sum, found = sum+value, true
	}
	if !found {
		return 0, fmt.Errorf("metric %s not found", strings.TrimSpace(prefix))
	}
	return sum, scanner.Err()
}

// reconciles is how many PostgresCluster reconciles the manager has run.
func (o *operator) reconciles() (float64, error) {
	return o.metricSum(`controller_runtime_reconcile_total{controller="postgrescluster",`)
}

// reconcileCPU profiles the manager for d and returns the CPU time spent under the
// PostgresCluster reconciler's Reconcile, and the profile's sample count there.
func (o *operator) reconcileCPU(ctx context.Context, d time.Duration) (time.Duration, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", o.pprofAddr, int(d.Seconds())), nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("cpu profile: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("cpu profile: %s", resp.Status)
	}
	p, err := profile.Parse(resp.Body)
	if err != nil {
		return 0, 0, fmt.Errorf("cpu profile: %w", err)
	}
	cpu := slices.IndexFunc(p.SampleType, func(t *profile.ValueType) bool { return t.Type == "cpu" })
	if cpu < 0 {
		return 0, 0, fmt.Errorf("cpu profile without cpu samples")
	}
	count := slices.IndexFunc(p.SampleType, func(t *profile.ValueType) bool { return t.Type == "samples" })
	var total time.Duration
	samples := 0
	for _, s := range p.Sample {
		if underReconcile(s) {
			total += time.Duration(s.Value[cpu])
			if count >= 0 {
				samples += int(s.Value[count])
			}
		}
	}
	return total, samples, nil
}

func underReconcile(s *profile.Sample) bool {
	for _, loc := range s.Location {
		for _, line := range loc.Line {
			if line.Function != nil && strings.HasSuffix(line.Function.Name, "(*PostgresClusterReconciler).Reconcile") {
				return true
			}
		}
	}
	return false
}

func median(values []float64) float64 {
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	return sorted[len(sorted)/2]
}

func waitFor(ctx context.Context, timeout time.Duration, done func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for !done() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out after %s", timeout)
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil
}
