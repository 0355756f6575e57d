package store

import (
	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/store/redisconn"
)

// The store's tests dial Redis as its callers do, through redisconn.

// NewClient is redisconn.NewClient.
func NewClient(rawURL string) (redis.UniversalClient, error) { return redisconn.NewClient(rawURL) }

// NewGatedClient is redisconn.NewGatedClient.
func NewGatedClient(rawURL string) (redis.UniversalClient, *redisconn.Gate, error) {
	return redisconn.NewGatedClient(rawURL)
}
