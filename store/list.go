package store

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Listing locks (GET /v1/locks): a SCAN over the names' fence keys, which every
// held or queued lock has (the fence key lives while a lock has holds or a
// queue), in Redis's scan order, not name order. The cursor is Redis's own
// (with the node's place on a cluster), so it survives other replicas and ends:
// SCAN visits every key that exists from start to end of the iteration, and may
// return a key twice, so a name can appear on two pages.

// ListRequest asks for a page of locks.
type ListRequest struct {
	Prefix string // names starting with it ("" for all)
	Limit  int    // at most this many locks per page
	Cursor string // where the last page ended; "" to start
	// Visible, when set, says which names the asker may see: others are skipped
	// (a key sees only the locks its grants cover).
	Visible func(name string) bool
}

// ListPage is a page of held or queued locks and the cursor of the next page
// ("" at the end).
type ListPage struct {
	Locks []State
	Next  string
}

// ErrBadCursor: the cursor was not made by List.
var ErrBadCursor = errors.New("bad cursor")

// listScanCount is the COUNT hint of each SCAN, and listMaxScans bounds the SCAN
// calls one page makes, so that a page over a sparse keyspace answers in time
// (possibly with fewer locks than asked, and a cursor to go on).
const listScanCount, listMaxScans = 1000, 20

// listCursor is where a page ends: a node, the SCAN cursor that produced the
// batch the page ended in, and the last name it returned from that batch. A
// batch's names are taken in name order, so the next page scans the batch
// again and goes on after that name: a name deleted meanwhile shifts nothing.
type listCursor struct {
	node  int
	scan  uint64
	after string
}

func (c listCursor) String() string {
	return strconv.Itoa(c.node) + "-" + strconv.FormatUint(c.scan, 10) + "-" + base64.RawURLEncoding.EncodeToString([]byte(c.after))
}

func parseListCursor(s string, nodes int) (listCursor, error) {
	f := strings.SplitN(s, "-", 3)
	if len(f) != 3 {
		return listCursor{}, ErrBadCursor
	}
	node, err1 := strconv.Atoi(f[0])
	scan, err2 := strconv.ParseUint(f[1], 10, 64)
	after, err3 := base64.RawURLEncoding.DecodeString(f[2])
	if err1 != nil || err2 != nil || err3 != nil || node < 0 || node >= nodes {
		return listCursor{}, ErrBadCursor
	}
	return listCursor{node: node, scan: scan, after: string(after)}, nil
}

// List returns a page of the locks that are held or queued, in scan order.
// Errors: ErrBadCursor, ErrUnavailable.
func (s *Store) List(ctx context.Context, r ListRequest) (ListPage, error) {
	nodes, err := s.scanNodes(ctx)
	if err != nil {
		return ListPage{}, err
	}
	var at listCursor
	if r.Cursor != "" {
		if at, err = parseListCursor(r.Cursor, len(nodes)); err != nil {
			return ListPage{}, err
		}
	}
	match := s.opt.Prefix + ":{" + r.Prefix + "*}:fence"
	var page ListPage
	for scans := 0; scans < listMaxScans; scans++ {
		keys, next, err := nodes[at.node].Scan(ctx, at.scan, match, listScanCount).Result()
		if err != nil {
			return ListPage{}, s.storeErr("list", err)
		}
		var names []string
		for _, k := range keys {
			name := strings.TrimSuffix(strings.TrimPrefix(k, s.opt.Prefix+":{"), "}:fence")
			if name > at.after && (r.Visible == nil || r.Visible(name)) {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		names = slices.Compact(names)
		states, err := s.states(ctx, names)
		if err != nil {
			return ListPage{}, err
		}
		for _, st := range states {
			if !st.Held && st.Waiters == 0 {
				continue
			}
			page.Locks = append(page.Locks, st)
			if len(page.Locks) == r.Limit {
				at.after = st.Name // the next page scans this batch again, after this name
				page.Next = at.String()
				return page, nil
			}
		}
		at.scan, at.after = next, ""
		if at.scan == 0 {
			at.node++
			if at.node == len(nodes) {
				return page, nil // the end
			}
		}
	}
	page.Next = at.String()
	return page, nil
}

// scanNodes are the Redis servers to scan: the one, or every master of a
// cluster in a stable order.
func (s *Store) scanNodes(ctx context.Context) ([]redis.Cmdable, error) {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return []redis.Cmdable{s.rdb}, nil
	}
	var mu sync.Mutex
	byAddr := map[string]*redis.Client{}
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		byAddr[c.Options().Addr] = c
		return nil
	})
	if err != nil {
		return nil, s.storeErr("list", err)
	}
	addrs := slices.Sorted(maps.Keys(byAddr))
	out := make([]redis.Cmdable, len(addrs))
	for i, a := range addrs {
		out[i] = byAddr[a]
	}
	return out, nil
}

// states reads the state of each lock, pipelined.
func (s *Store) states(ctx context.Context, names []string) ([]State, error) {
	if len(names) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.Cmd, len(names))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, n := range names {
			cmds[i] = s.state.EvalSha(ctx, p, s.keys(n), "", "")
		}
		return nil
	})
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// Scripts gone (Redis restarted): load and read one by one.
		out := make([]State, 0, len(names))
		for _, n := range names {
			st, err := s.State(ctx, n)
			if err != nil {
				return nil, err
			}
			out = append(out, st)
		}
		return out, nil
	}
	out := make([]State, 0, len(names))
	for i, c := range cmds {
		if redis.HasErrorPrefix(c.Err(), "TRYAGAIN") {
			// Its slot is migrating (go-redis's cluster pipeline sends it again
			// only when it is first of its node's batch): read it alone, which
			// waits the migration out (State).
			st, err := s.State(ctx, names[i])
			if err != nil {
				return nil, err
			}
			out = append(out, st)
			continue
		}
		v, err := c.Slice()
		if err != nil {
			return nil, s.storeErr("list", err)
		}
		rep, err := decodeReply(v)
		if err != nil {
			return nil, err
		}
		if rep.code != "state" {
			return nil, fmt.Errorf("list: %w", unexpected("state", rep))
		}
		out = append(out, rep.lockState(names[i]))
	}
	return out, nil
}
