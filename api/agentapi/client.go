package agentapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Endpoint is one agent as the operator reaches it: host:port, the cluster's token, and for an
// agent serving HTTPS the operator's TLS client configuration for the cluster.
type Endpoint struct {
	Address string
	Token   string
	// TLS, when set, is used for HTTPS: the operator's client certificate and the cluster's CA.
	// nil speaks plain HTTP, to the agent of a pod from an older operator.
	TLS *tls.Config
}

// HTTPClient calls agents over HTTP. The zero value is ready to use.
type HTTPClient struct {
	// Timeout bounds each request; zero means DefaultRequestTimeout.
	Timeout time.Duration
}

// DefaultRequestTimeout: the operator asks all instances at once, so a reconcile waits at most
// about this long however many agents hang.
const DefaultRequestTimeout = 3 * time.Second

// transport talks to agents directly, never through a proxy from the environment.
var transport = &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute}

// tlsTransports keep one HTTPS transport per TLS configuration (one per cluster and
// certificate), so that connections are reused; ForgetTLS drops a replaced one.
var tlsTransports sync.Map // *tls.Config -> *http.Transport

func transportFor(config *tls.Config) *http.Transport {
	if config == nil {
		return transport
	}
	if t, ok := tlsTransports.Load(config); ok {
		return t.(*http.Transport)
	}
	t, _ := tlsTransports.LoadOrStore(config, &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1,
		IdleConnTimeout: time.Minute, TLSClientConfig: config, ForceAttemptHTTP2: false})
	return t.(*http.Transport)
}

// ForgetTLS closes the connections made with config, which its cluster no longer uses (a
// renewed certificate, a deleted cluster).
func ForgetTLS(config *tls.Config) {
	if t, ok := tlsTransports.LoadAndDelete(config); ok {
		t.(*http.Transport).CloseIdleConnections()
	}
}

// Status asks the agent for its instance's status.
func (h HTTPClient) Status(ctx context.Context, e Endpoint) (*Status, error) {
	status := &Status{}
	if err := h.call(ctx, e, http.MethodGet, PathStatus, nil, http.StatusOK, status); err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	return status, nil
}

// DropSlots asks the primary's agent to drop the named slots no standby uses; it returns those
// dropped.
func (h HTTPClient) DropSlots(ctx context.Context, e Endpoint, slots []string) ([]string, error) {
	answer := &DropSlotsResponse{}
	if err := h.call(ctx, e, http.MethodPost, PathDropSlots, DropSlotsRequest{Slots: slots}, http.StatusOK, answer); err != nil {
		return nil, fmt.Errorf("drop slots: %w", err)
	}
	return answer.Dropped, nil
}

// Restart asks the agent to restart PostgreSQL in the background; ErrRestartInProgress when a
// restart already runs.
func (h HTTPClient) Restart(ctx context.Context, e Endpoint) error {
	if err := h.call(ctx, e, http.MethodPost, PathRestart, nil, http.StatusAccepted, nil); err != nil {
		return fmt.Errorf("restart: %w", conflictAs(err, ErrRestartInProgress))
	}
	return nil
}

// roleChangeTimeout bounds a promotion or a demotion, which wait for PostgreSQL to stop or
// start.
const roleChangeTimeout = 2 * time.Minute

// Promote turns the standby into the primary, with slots for the instances that will follow it.
func (h HTTPClient) Promote(ctx context.Context, e Endpoint, slots []string) (*PromoteResponse, error) {
	answer := &PromoteResponse{}
	long := HTTPClient{Timeout: max(h.Timeout, roleChangeTimeout)}
	if err := long.call(ctx, e, http.MethodPost, PathPromote, PromoteRequest{Slots: slots}, http.StatusOK, answer); err != nil {
		return nil, fmt.Errorf("promote: %w", conflictAs(err, ErrWrongRole))
	}
	return answer, nil
}

// Demote shuts the primary down cleanly and restarts it as a standby of the primary host.
func (h HTTPClient) Demote(ctx context.Context, e Endpoint) (*DemoteResponse, error) {
	answer := &DemoteResponse{}
	long := HTTPClient{Timeout: max(h.Timeout, roleChangeTimeout)}
	if err := long.call(ctx, e, http.MethodPost, PathDemote, nil, http.StatusOK, answer); err != nil {
		return nil, fmt.Errorf("demote: %w", conflictAs(err, ErrWrongRole))
	}
	return answer, nil
}

// fenceTimeout covers an immediate shutdown, which kills a postmaster still running after 10 s.
const fenceTimeout = 15 * time.Second

// Fence stops the instance's PostgreSQL at once and keeps it stopped until the primary Lease
// is granted again.
func (h HTTPClient) Fence(ctx context.Context, e Endpoint) (*Status, error) {
	answer := &Status{}
	long := HTTPClient{Timeout: max(h.Timeout, fenceTimeout)}
	if err := long.call(ctx, e, http.MethodPost, PathFence, nil, http.StatusOK, answer); err != nil {
		return nil, fmt.Errorf("fence: %w", err)
	}
	return answer, nil
}

// Detach stops the standby's WAL receiver and holds it off for DetachHold; the answer says for
// how long it has been stopped. ErrWrongRole from a primary; ErrNotSupported from an agent
// older than the order.
func (h HTTPClient) Detach(ctx context.Context, e Endpoint, from string) (*Status, error) {
	answer := &Status{}
	if err := h.call(ctx, e, http.MethodPost, PathDetach, DetachRequest{From: from}, http.StatusOK, answer); err != nil {
		return nil, fmt.Errorf("detach: %w", notFoundAs(conflictAs(err, ErrWrongRole), ErrNotSupported))
	}
	return answer, nil
}

// Attach lets a detached standby stream again.
func (h HTTPClient) Attach(ctx context.Context, e Endpoint) error {
	if err := h.call(ctx, e, http.MethodPost, PathAttach, nil, http.StatusOK, nil); err != nil {
		return fmt.Errorf("attach: %w", notFoundAs(err, ErrNotSupported))
	}
	return nil
}

// notFoundAs names a 404 answer (a path the agent does not serve) by err.
func notFoundAs(err, notFound error) error {
	if status, ok := err.(statusError); ok && status.code == http.StatusNotFound {
		return fmt.Errorf("%w: %s", notFound, status.body)
	}
	return err
}

// conflictAs names a 409 answer by the error the agent meant.
func conflictAs(err, conflict error) error {
	if status, ok := err.(statusError); ok && status.code == http.StatusConflict {
		return fmt.Errorf("%w: %s", conflict, status.body)
	}
	return err
}

// statusError is an answer other than the one expected.
type statusError struct {
	code int
	body string
}

func (e statusError) Error() string { return fmt.Sprintf("agent answered %d: %s", e.code, e.body) }

// call sends body as JSON (when not nil) and decodes the answer into into (when not nil),
// expecting the status code want.
func (h HTTPClient) call(ctx context.Context, e Endpoint, method, path string, body any, want int, into any) error {
	return h.callAny(ctx, e, method, path, body, []int{want}, into)
}

// StartBackup asks the primary's agent to take a backup in the background. It is idempotent
// by name: a backup the agent already knows answers its result. ErrBackupBusy when another
// runs or the instance is not the primary.
func (h HTTPClient) StartBackup(ctx context.Context, e Endpoint, req BackupRequest) (*BackupResult, error) {
	result := &BackupResult{}
	if err := h.callAny(ctx, e, http.MethodPost, PathBackups, req, []int{http.StatusAccepted, http.StatusOK}, result); err != nil {
		return nil, fmt.Errorf("start backup: %w", conflictAs(err, ErrBackupBusy))
	}
	return result, nil
}

// BackupResult asks the agent about the named backup; ErrUnknownBackup when it does not know it.
func (h HTTPClient) BackupResult(ctx context.Context, e Endpoint, name string) (*BackupResult, error) {
	result := &BackupResult{}
	known, err := h.getKnown(ctx, e, PathBackups+"/"+name, result)
	if err != nil {
		return nil, fmt.Errorf("backup %s: %w", name, err)
	}
	if !known {
		return nil, ErrUnknownBackup
	}
	return result, nil
}

// getKnown GETs path into into; false when the agent answers 404 (it knows no such thing).
func (h HTTPClient) getKnown(ctx context.Context, e Endpoint, path string, into any) (bool, error) {
	err := h.call(ctx, e, http.MethodGet, path, nil, http.StatusOK, into)
	if se, ok := err.(statusError); ok && se.code == http.StatusNotFound {
		return false, nil
	}
	return err == nil, err
}

func (h HTTPClient) callAny(ctx context.Context, e Endpoint, method, path string, body any, wants []int, into any) error {
	if e.Address == "" {
		return fmt.Errorf("no address (the pod has no IP yet, or is not one of the cluster's StatefulSet pods)")
	}
	var reader io.Reader = http.NoBody
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		reader = bytes.NewReader(data)
	}
	timeout := h.Timeout
	if timeout == 0 {
		timeout = DefaultRequestTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	scheme := "http://"
	if e.TLS != nil {
		scheme = "https://"
	}
	req, err := http.NewRequestWithContext(ctx, method, scheme+e.Address+path, reader)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+e.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: transportFor(e.TLS)}).Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if !slices.Contains(wants, resp.StatusCode) {
		text, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return statusError{code: resp.StatusCode, body: string(bytes.TrimSpace(text))}
	}
	if into != nil {
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			return fmt.Errorf("decode answer: %w", err)
		}
	}
	return nil
}

// StartMajorUpgradeCheck asks an instance running an older major's carried server to check an
// upgrade to its image's major in the background; the answer is the check as it stands (one
// already running included). ErrNothingToUpgrade when the instance runs its image's major,
// ErrNotSupported from an agent of a release without upgrades.
func (h HTTPClient) StartMajorUpgradeCheck(ctx context.Context, e Endpoint, req MajorUpgradeCheckRequest) (*MajorUpgradeCheckResult, error) {
	result := &MajorUpgradeCheckResult{}
	err := h.callAny(ctx, e, http.MethodPost, PathMajorUpgradeCheck, req, []int{http.StatusAccepted, http.StatusOK}, result)
	if err != nil {
		return nil, fmt.Errorf("start the major upgrade check: %w", notFoundAs(conflictAs(err, ErrNothingToUpgrade), ErrNotSupported))
	}
	return result, nil
}

// MajorUpgradeCheck is the instance's latest check; nil when it ran none since it started.
func (h HTTPClient) MajorUpgradeCheck(ctx context.Context, e Endpoint) (*MajorUpgradeCheckResult, error) {
	result := &MajorUpgradeCheckResult{}
	known, err := h.getKnown(ctx, e, PathMajorUpgradeCheck, result)
	if err != nil {
		return nil, fmt.Errorf("major upgrade check: %w", err)
	}
	if !known {
		return nil, nil
	}
	return result, nil
}

// StartMajorUpgrade asks the chosen standby to upgrade itself into the new major's primary in
// the background; ErrWrongRole when it cannot (not a standby on an older major, or without the
// primary Lease).
func (h HTTPClient) StartMajorUpgrade(ctx context.Context, e Endpoint, req MajorUpgradeRequest) (*MajorUpgradeResult, error) {
	result := &MajorUpgradeResult{}
	err := h.callAny(ctx, e, http.MethodPost, PathMajorUpgrade, req, []int{http.StatusAccepted, http.StatusOK}, result)
	if err != nil {
		return nil, fmt.Errorf("start the major upgrade: %w", notFoundAs(conflictAs(err, ErrWrongRole), ErrNotSupported))
	}
	return result, nil
}

// MajorUpgrade is the instance's major upgrade; nil when it ran none since it started.
func (h HTTPClient) MajorUpgrade(ctx context.Context, e Endpoint) (*MajorUpgradeResult, error) {
	result := &MajorUpgradeResult{}
	known, err := h.getKnown(ctx, e, PathMajorUpgrade, result)
	if err != nil {
		return nil, fmt.Errorf("major upgrade: %w", err)
	}
	if !known {
		return nil, nil
	}
	return result, nil
}

// StartMajorUpgradeRebuild asks an instance of the older major to rebuild itself as the upgraded
// primary's standby, in the background; ErrWrongRole when it cannot.
func (h HTTPClient) StartMajorUpgradeRebuild(ctx context.Context, e Endpoint, req MajorUpgradeRebuildRequest) (*MajorUpgradeRebuildResult, error) {
	result := &MajorUpgradeRebuildResult{}
	err := h.callAny(ctx, e, http.MethodPost, PathMajorUpgradeRebuild, req, []int{http.StatusAccepted, http.StatusOK}, result)
	if err != nil {
		return nil, fmt.Errorf("start the rebuild on the new major: %w", notFoundAs(conflictAs(err, ErrWrongRole), ErrNotSupported))
	}
	return result, nil
}

// MajorUpgradeRebuild is the instance's rebuild; nil when it ran none since it started.
func (h HTTPClient) MajorUpgradeRebuild(ctx context.Context, e Endpoint) (*MajorUpgradeRebuildResult, error) {
	result := &MajorUpgradeRebuildResult{}
	known, err := h.getKnown(ctx, e, PathMajorUpgradeRebuild, result)
	if err != nil {
		return nil, fmt.Errorf("rebuild on the new major: %w", err)
	}
	if !known {
		return nil, nil
	}
	return result, nil
}

// FetchFollowKit streams the follow kit of the instance at e (PathMajorUpgradeKit), over TLS
// only: it holds the new catalogs. The caller closes it; ctx bounds the whole transfer.
func FetchFollowKit(ctx context.Context, e Endpoint) (io.ReadCloser, error) {
	if e.TLS == nil || e.Address == "" {
		return nil, fmt.Errorf("a follow kit is fetched over TLS from an address")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+e.Address+PathMajorUpgradeKit, http.NoBody)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+e.Token)
	resp, err := (&http.Client{Transport: transportFor(e.TLS)}).Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		text, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		_ = resp.Body.Close()
		return nil, statusError{code: resp.StatusCode, body: string(bytes.TrimSpace(text))}
	}
	return resp.Body, nil
}

// ApplyCatalog gives the primary's agent the managed roles, which it applies in the background;
// ErrWrongRole from a standby, ErrNotSupported from an agent of a release without managed roles.
func (h HTTPClient) ApplyCatalog(ctx context.Context, e Endpoint, req CatalogRequest) error {
	if err := h.call(ctx, e, http.MethodPut, PathCatalog, req, http.StatusAccepted, nil); err != nil {
		return fmt.Errorf("apply roles: %w", notFoundAs(conflictAs(err, ErrWrongRole), ErrNotSupported))
	}
	return nil
}

// CatalogReport is the primary's latest report on the managed roles; nil before it was given any.
func (h HTTPClient) CatalogReport(ctx context.Context, e Endpoint) (*CatalogReport, error) {
	report := &CatalogReport{}
	known, err := h.getKnown(ctx, e, PathCatalog, report)
	if err != nil {
		return nil, fmt.Errorf("roles report: %w", err)
	}
	if !known {
		return nil, nil
	}
	return report, nil
}
