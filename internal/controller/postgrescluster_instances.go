package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/instance/agent"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// agentTimeout bounds one status request; all instances are asked at once, so a reconcile
// waits at most this long however many instances hang.
const agentTimeout = 3 * time.Second

// agentHTTP talks to agents directly, never through a proxy from the environment.
var agentHTTP = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute}}

// AgentAddress is where an instance pod's agent listens: its pod IP and the agent port.
func AgentAddress(pod *corev1.Pod) string {
	if pod.Status.PodIP == "" {
		return ""
	}
	return net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(pgbuilder.AgentPort))
}

// observeInstances asks every instance's agent for its status, concurrently and with a
// timeout, and records the answers in the scope.
func (r *PostgresClusterReconciler) observeInstances(ctx context.Context, s *scope) (ctrl.Result, error) {
	secret := &corev1.Secret{}
	err := r.Get(ctx, client.ObjectKey{Namespace: s.cluster.Namespace, Name: pgbuilder.AgentSecretName(s.cluster)}, secret)
	if apierrors.IsNotFound(err) {
		return r.notYet(), nil // just created; the cache has not seen it yet
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("get agent secret: %w", err)
	}
	token := string(secret.Data[corev1.BasicAuthPasswordKey])
	s.agentToken = token

	s.agents = make(map[string]*postgres.Status, len(s.pods))
	statuses := make([]pgv1.InstanceStatus, len(s.pods))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range s.pods {
		pod := &s.pods[i]
		statuses[i] = pgv1.InstanceStatus{Name: pod.Name, Ready: podReady(pod)}
		wg.Go(func() {
			status, err := r.askAgent(ctx, pod, token)
			if err != nil {
				statuses[i].Error = err.Error()
				return
			}
			mu.Lock()
			s.agents[pod.Name] = status
			mu.Unlock()
		})
	}
	wg.Wait()
	for i := range statuses {
		fillInstanceStatus(&statuses[i], s.agents)
	}
	slices.SortFunc(statuses, func(a, b pgv1.InstanceStatus) int { return compareNames(a.Name, b.Name) })
	s.instances = statuses
	return ctrl.Result{}, nil
}

// fillInstanceStatus copies what the instance's agent said, and its lag as the primary sees it.
func fillInstanceStatus(st *pgv1.InstanceStatus, agents map[string]*postgres.Status) {
	own, ok := agents[st.Name]
	if !ok {
		return
	}
	st.Role, st.Timeline, st.Streaming = own.Role, own.Timeline, own.Streaming
	st.PendingRestart = own.PendingRestart
	st.LSN = own.CurrentLSN
	if own.Role == postgres.RoleReplica {
		st.LSN = own.ReplayLSN
	}
	for _, other := range agents {
		for _, replica := range other.Replicas {
			if replica.ApplicationName == st.Name {
				lag := replica.LagBytes
				st.LagBytes = &lag
			}
		}
	}
}

func (r *PostgresClusterReconciler) askAgent(ctx context.Context, pod *corev1.Pod, token string) (*postgres.Status, error) {
	status := &postgres.Status{}
	code, err := r.callAgent(ctx, pod, token, http.MethodGet, agent.PathStatus, nil, status)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("agent answered %d", code)
	}
	if err != nil {
		return nil, fmt.Errorf("ask agent: %w", err)
	}
	return status, nil
}

// callAgent sends a request to path on the pod's agent with the cluster's token: body as JSON
// when not nil, and a 200 answer decoded into into when given. It returns the status code.
func (r *PostgresClusterReconciler) callAgent(ctx context.Context, pod *corev1.Pod, token, method, path string, body, into any) (int, error) {
	address := r.agentAddress(pod)
	if address == "" {
		return 0, fmt.Errorf("pod has no IP yet")
	}
	var reader io.Reader = http.NoBody
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		reader = bytes.NewReader(data)
	}
	ctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+address+path, reader)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := agentHTTP.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode == http.StatusOK && into != nil {
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			return resp.StatusCode, fmt.Errorf("decode agent answer: %w", err)
		}
	}
	return resp.StatusCode, nil
}

func (r *PostgresClusterReconciler) agentAddress(pod *corev1.Pod) string {
	if r.AgentAddress != nil {
		return r.AgentAddress(pod)
	}
	return AgentAddress(pod)
}

// compareNames orders instance pods by ordinal (db-2 before db-10).
func compareNames(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
