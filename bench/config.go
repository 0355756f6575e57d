package main

import "time"

// System names, as they appear in results.json.
const (
	sysBaton       = "baton"
	sysEtcd        = "etcd"
	sysEtcdLease   = "etcd-lease" // etcd with one lease kept per client: lock + unlock per pair
	sysRedislock   = "redislock"
	sysRedisScript = "redis-script"
	sysBatonRef    = "baton-ref" // the reference commit's Baton (-ref), on the same Redis
	sysHello       = "hello"     // two requests to a minimal net/http handler: the HTTP floor
	sysFloor       = "floor"     // SET NX PX + a Lua compare-and-delete: the Redis floor
)

var allSystems = []string{sysBaton, sysBatonRef, sysHello, sysEtcd, sysEtcdLease, sysFloor, sysRedislock, sysRedisScript}

// defaultRef is the commit the full mode builds and runs as baton-ref.
const defaultRef = "b42c606"

// The cells of the durability table: each system without persistence (Redis
// with no AOF or RDB, etcd's data on tmpfs) and durable (Redis with appendonly
// and appendfsync always, etcd's data on disk).
const (
	durMemory  = "memory"
	durDurable = "durable"
)

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

	// durability cells of the uncontended scenario, memory first; the durable
	// cell runs at durableConcurrency (the memory one at concurrency)
	durabilities       []string
	durableConcurrency []int

	// cluster: Baton over one Redis and over a Redis Cluster, uncontended at
	// these concurrencies, then these levels of waiters on the cluster
	clusterConcurrency []int
	clusterWaiters     []int

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

	batonBin string // a prebuilt Baton to run instead of building ./cmd/server; "" builds
	ref      string // a commit to build and run beside it as baton-ref; "" for none

	// commands: pairs on one name under MONITOR, and names each acquired and
	// released once before their keys are counted
	monitorPairs, keysNames int

	// uncontended: also Baton with access control off and in keys mode
	// (baton-off, baton-keys), beside the default protected mode (baton)
	authCompare bool

	scenarios map[string]bool // nil: all
	systems   map[string]bool // nil: all
}

func quickConfig() config {
	return config{
		mode:               "quick",
		runs:               2,
		concurrency:        []int{1, 16, 64},
		durabilities:       []string{durMemory, durDurable},
		durableConcurrency: []int{16},
		clusterConcurrency: []int{16},
		clusterWaiters:     []int{1000},
		duration:           time.Second,
		warmup:             250 * time.Millisecond,
		handoffWaiters:     []int{2, 16, 64},
		handoffSamples:     64,
		sharedClients:      16,
		sharedDuration:     time.Second,
		sharedWarmup:       250 * time.Millisecond,
		sharedTickets:      16,
		sharedRounds:       40,
		waiterLevels:       []int{1000, 10000, 20000},
		waiterCap:          20000,
		idleWindow:         1500 * time.Millisecond,
		expiryReps:         15,
		expiryTTL:          200 * time.Millisecond,
		expiryStagger:      40 * time.Millisecond,
		etcdExpiryReps:     15,
		namesCounts:        []int{10000},
		namesGuard:         2 * time.Second,
		monitorPairs:       200,
		keysNames:          500,
	}
}

func fullConfig() config {
	return config{
		mode:               "full",
		full:               true,
		runs:               3,
		concurrency:        []int{1, 16, 64},
		durabilities:       []string{durMemory, durDurable},
		durableConcurrency: []int{16, 64},
		clusterConcurrency: []int{16},
		clusterWaiters:     []int{10000},
		duration:           4 * time.Second,
		warmup:             500 * time.Millisecond,
		handoffWaiters:     []int{2, 16, 64},
		handoffSamples:     300,
		sharedClients:      16,
		sharedDuration:     1500 * time.Millisecond,
		sharedWarmup:       500 * time.Millisecond,
		sharedTickets:      16,
		sharedRounds:       100,
		waiterLevels:       []int{1000, 10000, 20000, 50000},
		waiterCap:          50000,
		idleWindow:         4 * time.Second,
		expiryReps:         50,
		expiryTTL:          200 * time.Millisecond,
		expiryStagger:      40 * time.Millisecond,
		etcdExpiryReps:     50,
		namesCounts:        []int{10000, 100000, 1000000},
		namesGuard:         2 * time.Second,
		// redislock deletes its key on release: 1M names would show nothing
		// 100k does not, and cost 30 s of the 10 minutes.
		namesMax:     map[string]int{sysRedislock: 100000},
		ref:          defaultRef,
		monitorPairs: 1000,
		keysNames:    2000,
	}
}

func (c config) wantScenario(s string) bool { return c.scenarios == nil || c.scenarios[s] }
func (c config) wantSystem(s string) bool   { return c.systems == nil || c.systems[s] }
func (c config) wantDurability(d string) bool {
	for _, x := range c.durabilities {
		if x == d {
			return true
		}
	}
	return false
}
