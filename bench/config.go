package main

import "time"

// System names, as they appear in results.json.
const (
	sysBaton       = "baton"
	sysEtcd        = "etcd"
	sysRedislock   = "redislock"
	sysRedisScript = "redis-script"
)

var allSystems = []string{sysBaton, sysEtcd, sysRedislock, sysRedisScript}

// config is what one mode (quick or full) runs. Every figure is the median of
// runs runs.
type config struct {
	mode string
	full bool
	runs int

	// uncontended
	concurrency []int
	duration    time.Duration // measured part of one run
	warmup      time.Duration // before it, not measured
	rate        float64       // > 0: open-loop at this rate (pairs/s) instead of closed-loop

	// handoff
	handoffWaiters []int
	handoffSamples int // handoffs measured per run (at least; whole rounds)

	// shared
	sharedClients  int           // clients taking shared holds on one lock
	sharedDuration time.Duration // measured part of one run of their pairs
	sharedWarmup   time.Duration
	sharedTickets  int // queued shared tickets one exclusive release grants
	sharedRounds   int // runs of them per run

	// waiters
	waiterLevels []int // the last is raised to what the machine allows (see maxWaiters)
	waiterCap    int   // never more than this many, whatever the machine allows
	idleWindow   time.Duration

	// expiry_handoff
	expiryReps     int
	expiryTTL      time.Duration // the vanishing holder's lease
	expiryStagger  time.Duration // between the starts of two repetitions
	etcdExpiryReps int

	// names
	namesCounts []int          // distinct names per run, smallest first
	namesGuard  time.Duration  // fence guard of Baton and redis-script, and the leases' ttl
	namesMax    map[string]int // system -> the most names it runs with; absent: no cap

	etcdTmpfs bool   // etcd's data directory on /dev/shm instead of disk
	batonBin  string // a prebuilt Baton to run instead of building ./cmd/server; "" builds

	// uncontended: also Baton with access control off and in keys mode
	// (baton-off, baton-keys), beside the default protected mode (baton)
	authCompare bool

	scenarios map[string]bool // nil: all
	systems   map[string]bool // nil: all
}

func quickConfig() config {
	return config{
		mode:           "quick",
		runs:           2,
		concurrency:    []int{1, 16, 64},
		duration:       time.Second,
		warmup:         250 * time.Millisecond,
		handoffWaiters: []int{2, 16, 64},
		handoffSamples: 64,
		sharedClients:  16,
		sharedDuration: time.Second,
		sharedWarmup:   250 * time.Millisecond,
		sharedTickets:  16,
		sharedRounds:   40,
		waiterLevels:   []int{1000, 10000, 20000},
		waiterCap:      20000,
		idleWindow:     1500 * time.Millisecond,
		expiryReps:     15,
		expiryTTL:      200 * time.Millisecond,
		expiryStagger:  40 * time.Millisecond,
		etcdExpiryReps: 15,
		namesCounts:    []int{10000},
		namesGuard:     2 * time.Second,
	}
}

func fullConfig() config {
	return config{
		mode:           "full",
		full:           true,
		runs:           3,
		concurrency:    []int{1, 16, 64},
		duration:       4 * time.Second,
		warmup:         500 * time.Millisecond,
		handoffWaiters: []int{2, 16, 64},
		handoffSamples: 300,
		sharedClients:  16,
		sharedDuration: 1500 * time.Millisecond,
		sharedWarmup:   500 * time.Millisecond,
		sharedTickets:  16,
		sharedRounds:   100,
		waiterLevels:   []int{1000, 10000, 20000, 50000},
		waiterCap:      50000,
		idleWindow:     4 * time.Second,
		expiryReps:     50,
		expiryTTL:      200 * time.Millisecond,
		expiryStagger:  40 * time.Millisecond,
		etcdExpiryReps: 50,
		namesCounts:    []int{10000, 100000, 1000000},
		namesGuard:     2 * time.Second,
		// redislock deletes its key on release: 1M names would show nothing
		// 100k does not, and cost 30 s of the 10 minutes.
		namesMax: map[string]int{sysRedislock: 100000},
	}
}

func (c config) wantScenario(s string) bool { return c.scenarios == nil || c.scenarios[s] }
func (c config) wantSystem(s string) bool   { return c.systems == nil || c.systems[s] }
