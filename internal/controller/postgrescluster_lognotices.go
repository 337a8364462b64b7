package controller

import (
	"context"
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// logNoticesSeen remembers, per instance and kind, how many notable PostgreSQL log records the
// operator has announced: only in memory, so that a storm of failed logins costs Events (which
// the recorder folds into series) and no status writes. A restarted operator announces each
// kind once more.
type logNoticesSeen struct {
	mu    sync.Mutex
	count map[logNoticeKey]int64
}

type logNoticeKey struct {
	cluster     types.NamespacedName
	pod, reason string
}

// announced records count for key and says whether it is news.
func (l *logNoticesSeen) announced(key logNoticeKey, count int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.count == nil {
		l.count = map[logNoticeKey]int64{}
	}
	if l.count[key] >= count {
		return false
	}
	l.count[key] = count
	return true
}

// forget drops what was remembered of a deleted cluster.
func (l *logNoticesSeen) forget(cluster types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	maps.DeleteFunc(l.count, func(k logNoticeKey, _ int64) bool { return k.cluster == cluster })
}

// announceLogNotices makes a Warning Event of each kind of notable PostgreSQL log record an
// instance reported since the last reconcile (authentication failures, archive_command
// failures, a full disk, a PANIC), naming the pod and the latest record, so that
// `kubectl describe pgc` shows what only the logs said.
func (r *PostgresClusterReconciler) announceLogNotices(_ context.Context, s *scope) (*stop, error) {
	cluster := types.NamespacedName{Namespace: s.cluster.Namespace, Name: s.cluster.Name}
	for _, pod := range slices.Sorted(maps.Keys(s.observed.Reports)) {
		report := s.observed.Reports[pod]
		if report == nil {
			continue
		}
		var related runtime.Object
		if p := s.observed.Pod(pod); p != nil {
			related = p
		}
		for _, n := range report.LogNotices {
			if r.memory().logNotices.announced(logNoticeKey{cluster, pod, n.Reason}, n.Count) {
				r.event(s.cluster, related, corev1.EventTypeWarning, n.Reason, "PostgreSQLLog", "%s: %s", pod, n.Message)
			}
		}
	}
	return nil, nil
}
