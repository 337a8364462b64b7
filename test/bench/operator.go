package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
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
	o.cmd.Env = append(os.Environ(), "KUBECONFIG="+o.kubeconfig, "RELATED_IMAGE_POSTGRES_17=postgresql:17", "RELATED_IMAGE_AGENT=pgpilot-operator:bench")
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

// memoryUse is the manager's memory: its resident set, the part of it that is its own (anonymous;
// the rest are pages of the binary and other files, clean and reclaimable), and the Go heap.
type memoryUse struct {
	RSSMiB     float64 `json:"rssMiB"`
	RSSAnonMiB float64 `json:"rssAnonMiB"`
	HeapMiB    float64 `json:"heapMiB"`
}

func (m memoryUse) String() string {
	return fmt.Sprintf("%.1f / %.1f / %.1f", m.RSSMiB, m.RSSAnonMiB, m.HeapMiB)
}

// memory samples the manager's memory a few times, each right after a garbage collection
// (which asking pprof for a heap profile with gc=1 runs), and keeps the medians: otherwise the
// heap counts whatever garbage the collector's rhythm left, which grows with the heap itself.
func (o *operator) memory(ctx context.Context, samples int) (memoryUse, error) {
	var rss, anon, heap []float64
	for i := range samples {
		if i > 0 {
			select {
			case <-ctx.Done():
				return memoryUse{}, ctx.Err()
			case <-time.After(2 * time.Second):
			}
		}
		if err := o.collectGarbage(ctx); err != nil {
			return memoryUse{}, err
		}
		status, err := o.procStatusKiB("VmRSS", "RssAnon")
		if err != nil {
			return memoryUse{}, err
		}
		h, err := o.metric("go_memstats_heap_inuse_bytes")
		if err != nil {
			return memoryUse{}, err
		}
		rss, anon, heap = append(rss, status[0]/1024), append(anon, status[1]/1024), append(heap, h/(1<<20))
	}
	return memoryUse{RSSMiB: median(rss), RSSAnonMiB: median(anon), HeapMiB: median(heap)}, nil
}

// procStatusKiB reads fields of the manager's /proc/<pid>/status, in kB, in the order asked.
func (o *operator) procStatusKiB(fields ...string) ([]float64, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(o.cmd.Process.Pid), "status"))
	if err != nil {
		return nil, err
	}
	values := make([]float64, len(fields))
	for i, field := range fields {
		_, rest, found := strings.Cut(string(data), "\n"+field+":")
		if !found {
			return nil, fmt.Errorf("no %s in /proc status", field)
		}
		line, _, _ := strings.Cut(rest, "\n")
		if values[i], err = strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(line), "kB")), 64); err != nil {
			return nil, fmt.Errorf("%s in /proc status: %w", field, err)
		}
	}
	return values, nil
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

func (o *operator) collectGarbage(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+o.pprofAddr+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// cpuAndReconciles is the CPU time the manager has used so far and how many PostgresCluster
// reconciles it has run.
func (o *operator) cpuAndReconciles() (cpuSeconds, reconciles float64, err error) {
	if cpuSeconds, err = o.cpuSeconds(); err != nil {
		return 0, 0, err
	}
	reconciles, err = o.metricSum(`controller_runtime_reconcile_total{controller="postgrescluster",`)
	return cpuSeconds, reconciles, err
}

// reconcileCPU profiles the manager for d and returns the CPU time spent under the
// PostgresCluster reconciler's Reconcile, and the profile's sample count there. It writes the
// profile to save, unless that is empty.
func (o *operator) reconcileCPU(ctx context.Context, d time.Duration, save string) (time.Duration, int, error) {
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
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, fmt.Errorf("cpu profile: %w", err)
	}
	if save != "" {
		if err := os.WriteFile(save, data, 0o644); err != nil {
			return 0, 0, err
		}
	}
	p, err := profile.ParseData(data)
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
