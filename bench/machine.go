package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
)

// machine describes where the figures were taken.
type machine struct {
	cpuModel string
	cpus     int
	memGiB   float64
	kernel   string
	goVer    string
	redisVer string
	etcdVer  string
}

func machineInfo(ctx context.Context, e *env) machine {
	m := machine{cpus: e.pin.CPUs, goVer: runtime.Version(), cpuModel: "unknown CPU"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpuModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				var kb float64
				fmt.Sscanf(strings.TrimSpace(v), "%f", &kb)
				m.memGiB = kb / (1 << 20)
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = "Linux " + strings.TrimSpace(string(b))
	}
	m.redisVer = firstLine(ctx, "redis-server", "--version")
	m.etcdVer = firstLine(ctx, "etcd", "--version")
	return m
}

func firstLine(ctx context.Context, bin string, args ...string) string {
	out, err := exec.CommandContext(ctx, bin, args...).Output()
	if err != nil {
		return "unavailable"
	}
	l, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return l
}

func (m machine) summary() string {
	return fmt.Sprintf("%s, %d CPUs, %.1f GiB, %s, %s, %s, %s",
		m.cpuModel, m.cpus, m.memGiB, m.kernel, m.goVer, shortVersion(m.redisVer), shortVersion(m.etcdVer))
}

// shortVersion turns "Redis server v=7.0.15 sha=…" into "redis 7.0.15" and
// "etcd Version: 3.4.23" into "etcd 3.4.23".
func shortVersion(s string) string {
	switch {
	case strings.HasPrefix(s, "Redis server v="):
		v, _, _ := strings.Cut(strings.TrimPrefix(s, "Redis server v="), " ")
		return "redis " + v
	case strings.HasPrefix(s, "etcd Version: "):
		return "etcd " + strings.TrimPrefix(s, "etcd Version: ")
	}
	return s
}
