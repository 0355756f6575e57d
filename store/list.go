package store

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Listing locks (GET /v1/locks): a SCAN over the names' fence keys, which every
// held or queued lock has (the fence key lives while a lock has holds or a
// queue), in Redis's scan order, not name order. The cursor is Redis's own
// (with the node's place on a cluster), so it survives other replicas and ends:
// SCAN visits every key that exists from start to end of the iteration, and may
// return a key twice, so a name can appear on two pages.
//
// On a cluster the masters are scanned one after another in the order of the
// first slot each serves, and the cursor names its node by that slot (and a
// hash of the node's address), not by its place in a list of addresses: after
// a failover the promoted replica serves the same slots, so the listing goes on
// with it, scanning it from the start (a SCAN cursor means nothing on another
// node), and no shard is skipped or done twice.

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
	node  int    // the node's place in scanNodes (resolved from first on a cluster)
	first int    // cluster: the first slot the node serves; -1 on one Redis
	id    string // cluster: the hash of the node's address
	scan  uint64
	after string
}

func (c listCursor) String() string {
	node := "0"
	if c.first >= 0 {
		node = "s" + strconv.Itoa(c.first) + "." + c.id
	}
	return node + "-" + strconv.FormatUint(c.scan, 10) + "-" + base64.RawURLEncoding.EncodeToString([]byte(c.after))
}

// parseListCursor reads a cursor and finds its node among nodes: on a
// cluster, the one serving its first slot now, from the start of its SCAN if
// that is another node than the cursor's.
func parseListCursor(s string, nodes []scanNode) (listCursor, error) {
	f := strings.SplitN(s, "-", 3)
	if len(f) != 3 {
		return listCursor{}, ErrBadCursor
	}
	c := listCursor{first: -1}
	scan, err2 := strconv.ParseUint(f[1], 10, 64)
	after, err3 := base64.RawURLEncoding.DecodeString(f[2])
	if err2 != nil || err3 != nil {
		return listCursor{}, ErrBadCursor
	}
	c.scan, c.after = scan, string(after)
	cluster := nodes[0].first >= 0
	if !cluster {
		if f[0] != "0" {
			return listCursor{}, ErrBadCursor
		}
		return c, nil
	}
	first, id, ok := strings.Cut(strings.TrimPrefix(f[0], "s"), ".")
	n, err := strconv.Atoi(first)
	if !ok || !strings.HasPrefix(f[0], "s") || err != nil || n < 0 || n >= 16384 {
		return listCursor{}, ErrBadCursor
	}
	c.first, c.id, c.node = n, id, -1
	for i, nd := range nodes {
		if nd.serves(n) {
			c.node = i
		}
	}
	if c.node < 0 {
		return listCursor{}, fmt.Errorf("list: %w: no node serves slot %d", ErrUnavailable, n)
	}
	if nodes[c.node].id != id { // another node: a failover; its SCAN anew
		c.scan, c.after = 0, ""
	}
	c.first, c.id = nodes[c.node].first, nodes[c.node].id
	return c, nil
}

// List returns a page of the locks that are held or queued, in scan order.
// Errors: ErrBadCursor, ErrUnavailable.
func (s *Store) List(ctx context.Context, r ListRequest) (ListPage, error) {
	nodes, err := s.scanNodes(ctx)
	if err != nil {
		return ListPage{}, err
	}
	at := listCursor{first: nodes[0].first, id: nodes[0].id}
	if r.Cursor != "" {
		if at, err = parseListCursor(r.Cursor, nodes); err != nil {
			return ListPage{}, err
		}
	}
	match := s.opt.Prefix + ":{" + r.Prefix + "*}:fence"
	var page ListPage
	for scans := 0; scans < listMaxScans; scans++ {
		keys, next, err := nodes[at.node].c.Scan(ctx, at.scan, match, listScanCount).Result()
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
			at.first, at.id = nodes[at.node].first, nodes[at.node].id
		}
	}
	page.Next = at.String()
	return page, nil
}

// scanNode is a Redis server to scan; on a cluster, a master and the slots it
// serves.
type scanNode struct {
	c      redis.Cmdable
	first  int    // the first slot it serves; -1 on one Redis
	id     string // a hash of its address
	ranges [][2]int
}

func (n scanNode) serves(slot int) bool {
	for _, r := range n.ranges {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// scanNodes are the Redis servers to scan: the one, or every master of a
// cluster in the order of the first slot each serves.
func (s *Store) scanNodes(ctx context.Context) ([]scanNode, error) {
	if s.cluster == nil {
		return []scanNode{{c: s.rdb, first: -1}}, nil
	}
	slots, err := s.cluster.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, s.storeErr("list", err)
	}
	byAddr := map[string]*scanNode{}
	for _, r := range slots {
		if len(r.Nodes) == 0 {
			continue
		}
		addr := r.Nodes[0].Addr
		n := byAddr[addr]
		if n == nil {
			h := fnv.New32a()
			h.Write([]byte(addr))
			n = &scanNode{c: s.topo.node(addr), first: r.Start, id: strconv.FormatUint(uint64(h.Sum32()), 36)}
			byAddr[addr] = n
		}
		n.first = min(n.first, r.Start)
		n.ranges = append(n.ranges, [2]int{r.Start, r.End})
	}
	if len(byAddr) == 0 {
		return nil, fmt.Errorf("list: %w: no node serves a slot", ErrUnavailable)
	}
	out := make([]scanNode, 0, len(byAddr))
	for _, n := range byAddr {
		out = append(out, *n)
	}
	slices.SortFunc(out, func(a, b scanNode) int { return a.first - b.first })
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
			cmds[i] = s.state.EvalSha(ctx, s.pipeScripter(p), s.keys(n), "", "")
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
