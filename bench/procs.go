package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The load generator (this process) runs on generatorCPU and the serving side on
// serverCPU, when the machine has at least two CPUs.
const (
	generatorCPU = 0
	serverCPU    = 1
	pinnedEnv    = "BATON_BENCH_PINNED" // set in the re-executed, pinned process: the machine's CPU count
)

// pinGenerator re-executes this program under `taskset -c 0` when the machine has
// two or more CPUs and it is not pinned yet. Setting the affinity of a running Go
// process is unreliable (the runtime may start a thread meanwhile); a process that
// starts pinned has every thread pinned. A missing taskset leaves it unpinned.
func pinGenerator() error {
	if os.Getenv(pinnedEnv) != "" || runtime.NumCPU() < 2 {
		return nil
	}
	ts, err := exec.LookPath("taskset")
	if err != nil {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	env := append(os.Environ(), pinnedEnv+"="+strconv.Itoa(runtime.NumCPU()))
	argv := append([]string{"taskset", "-c", strconv.Itoa(generatorCPU), exe}, os.Args[1:]...)
	return syscall.Exec(ts, argv, env)
}

// machineCPUs is the machine's CPU count, also when this process is pinned to one.
func machineCPUs() int {
	if n, err := strconv.Atoi(os.Getenv(pinnedEnv)); err == nil && n > 0 {
		return n
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err == nil && set.Count() > runtime.NumCPU() {
		return set.Count()
	}
	return runtime.NumCPU()
}

// pinning records what ran where, for results.json and RESULTS.md.
type pinning struct {
	CPUs      int               `json:"cpus"`
	Server    string            `json:"server_cpus"`    // "" when not pinned
	Generator string            `json:"generator_cpus"` // "" when not pinned
	Processes map[string]string `json:"processes"`      // process -> Cpus_allowed_list as read from /proc
	Note      string            `json:"note"`
}

// pinProcess sets the CPU affinity of every thread of pid (like `taskset -a -p`).
func pinProcess(pid, cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	for range 2 { // twice: a thread started during the first pass is caught by the second
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return err
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
				return fmt.Errorf("pin %d/%d: %w", pid, tid, err)
			}
		}
	}
	return nil
}

// allowedCPUs is the Cpus_allowed_list of a process, as /proc says.
func allowedCPUs(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// cpuTime is the user+system CPU time a process has used so far, all its threads,
// dead or alive, from /proc/<pid>/stat (in clock ticks of 10 ms).
func cpuTime(pid int) (time.Duration, error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	return ticks(f[11]) + ticks(f[12]), nil
}

// childrenCPU is the CPU time of this process's children that have exited and
// been waited for (cutime+cstime).
func childrenCPU() time.Duration {
	f, err := statFields(os.Getpid())
	if err != nil {
		return 0
	}
	return ticks(f[13]) + ticks(f[14])
}

// statFields are the fields of /proc/<pid>/stat from field 3 (state) on.
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return nil, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	return f, nil
}

// ticks reads a count of clock ticks (USER_HZ, 100 on Linux).
func ticks(s string) time.Duration {
	n, _ := strconv.ParseInt(s, 10, 64)
	return time.Duration(n) * 10 * time.Millisecond
}

// machineBusy is the CPU time all CPUs have spent busy (not idle or waiting for
// I/O) since boot, from /proc/stat.
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	var busy time.Duration
	for i, v := range f[1:] {
		if i != 3 && i != 4 && i < 8 {
			busy += ticks(v)
		}
	}
	return busy
}

// cpuTimes sums cpuTime over pids.
func cpuTimes(pids []int) (time.Duration, error) {
	var sum time.Duration
	for _, p := range pids {
		t, err := cpuTime(p)
		if err != nil {
			return 0, err
		}
		sum += t
	}
	return sum, nil
}

// rssBytes is a process's resident set (VmRSS).
func rssBytes(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// raiseNoFile lifts this process's open-file limit (soft and hard; root may
// raise the hard limit up to fs.nr_open). Children inherit it: calling
// syscall.Setrlimit also stops os/exec from restoring the original soft limit in
// them. It returns the limit now in force.
func raiseNoFile(want uint64) uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && want > n {
			want = n
		}
	}
	if want > lim.Max {
		nl := syscall.Rlimit{Cur: want, Max: want}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &nl) == nil {
			return want
		}
	}
	nl := syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &nl)
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	return lim.Cur
}

// proc is a child process this program started and will stop.
type proc struct {
	name   string
	cmd    *exec.Cmd
	logf   *os.File
	exited chan struct{}
}

// startProc starts bin with args and extra environment, pinned to serverCPU when
// pin is set, its output going to dir/name.log. The child is killed if this
// process dies first.
func startProc(dir, name string, pin bool, env []string, bin string, args ...string) (*proc, error) {
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	var cmd *exec.Cmd
	if pin {
		cmd = exec.Command("taskset", append([]string{"-c", strconv.Itoa(serverCPU), bin}, args...)...)
	} else {
		cmd = exec.Command(bin, args...)
	}
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logf: logf, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	if p == nil {
		return
	}
	if p.alive() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(grace):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	p.logf.Close()
}

// logTail is the end of what the process printed, for error messages.
func (p *proc) logTail() string {
	b, err := os.ReadFile(p.logf.Name())
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
