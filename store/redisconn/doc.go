// Package redisconn connects Baton to Redis: it reads the URLs of a single
// Redis, a Sentinel group and a Redis Cluster, makes go-redis clients set up as
// the lock store needs them (no automatic retries), keeps calls away from a
// Redis that is down (Gate), keeps a map of a cluster's slots and a client per
// master (Topology), classifies connection errors, and names the spans of
// traced script calls.
//
// It knows nothing of locks: the store (package store) builds on it, and
// nothing here imports the store.
package redisconn
