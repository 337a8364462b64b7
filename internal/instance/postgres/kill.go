package postgres

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// killExitWait bounds the wait for a killed postmaster to be reaped: a process in an
// uninterruptible sleep (a hung disk) dies only when its I/O returns, and never runs user code
// before that.
const killExitWait = 5 * time.Second

// Kill stops a server that does not answer (frozen: a hung disk, a stuck kernel, a stopped
// process) at once and for good: SIGKILL to the postmaster and to every process it forked. A
// SIGQUIT would wait for a postmaster that never passes it on, and a backend that outlived its
// postmaster could still acknowledge a commit once it runs again. The postmaster is stopped
// first so that it forks nothing between the listing of its children and their end.
func (i *Instance) Kill() error {
	if !i.Running() {
		return nil
	}
	pid := i.postmaster.Process.Pid
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	children, listErr := ChildrenOf(pid)
	for _, child := range children {
		_ = syscall.Kill(child, syscall.SIGKILL)
	}
	_ = i.postmaster.Process.Kill()
	deadline := time.After(killExitWait)
	select {
	case <-i.exited:
	case <-deadline:
		return errors.Join(listErr, fmt.Errorf("postmaster %d killed but not yet reaped after %s (uninterruptible I/O?)", pid, killExitWait))
	}
	// The orphans die as the kernel delivers their SIGKILL; wait for that, so that "fenced"
	// means gone (CI saw two of them still listed right after the fence).
	for _, child := range children {
		for exists(child) {
			select {
			case <-deadline:
				return errors.Join(listErr, fmt.Errorf("process %d of postmaster %d killed but not gone after %s", child, pid, killExitWait))
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return listErr
}

// exists: the process runs or waits to run; a zombie (dead, not yet reaped) does not count.
func exists(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	fields := statFields(stat)
	return len(fields) > 0 && string(fields[0]) != "Z" && string(fields[0]) != "X"
}

// ChildrenOf lists the processes whose parent is pid, from /proc.
func ChildrenOf(pid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var children []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		if parentOf(stat) == pid {
			children = append(children, child)
		}
	}
	return children, nil
}

// parentOf reads the parent PID from a /proc/<pid>/stat line.
func parentOf(stat []byte) int {
	fields := statFields(stat)
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(string(fields[1]))
	return ppid
}

// statFields are the fields of a /proc/<pid>/stat line after the command, from the state on:
// "pid (comm) state ppid ...", where comm may hold spaces and parentheses, so they are counted
// after the last ')'. nil for a line without one.
func statFields(stat []byte) [][]byte {
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return nil
	}
	return bytes.Fields(stat[end+1:])
}
