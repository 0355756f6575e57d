package store

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/store/redisconn"
)

// Redis Cluster.
//
// Every key of a lock, its tickets and its channel share the slot of {name};
// a session's keys share the slot of its own tag. So every script touches one
// slot, and go-redis's cluster client sends it to the slot's master, following
// MOVED and ASK. Three things the cluster client does not do for the store are
// done here, from a slot map of the store's own (redisconn.Topology):
//
//   - pub/sub: the scripts announce with SPUBLISH (lua.Settings.Sharded), and
//     the dispatcher keeps one SSUBSCRIBE connection per master (link), each
//     lock's channel on the master of its slot, moved when the slot moves;
//   - WAIT: it covers the writes of its own connection, so with
//     WaitReplicas the script, a replicated bump and WAIT go in one pipeline
//     on a connection to the slot's master (evalWaitCluster, replicas.go);
//   - the clock: each master has its own, so "not after" deadlines and
//     handoff latencies use the offset of the lock's master.

// clusterErr has the cluster client and the slot map loaded afresh after an
// error that may mean a node is gone: go-redis's cluster client would, when it
// retries, but the store's scripts are sent once (redisconn.OnceCmd).
func (s *Store) clusterErr(err error) {
	if s.cluster == nil || err == nil {
		return
	}
	if redisconn.IsConnError(err) || redis.HasErrorPrefix(err, "CLUSTERDOWN") || redis.HasErrorPrefix(err, "MOVED") {
		s.cluster.ReloadState(context.Background())
		s.topo.Refresh()
	}
}
