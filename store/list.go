package store

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/lua"
)

// Listing locks (GET /v1/locks): a SCAN over the locks' keys, which every
// held or queued lock has (a lock's key lives while it has holds or a queue,
// and for the fence guard after), in Redis's scan order, not name order. The
// cursor is Redis's own (on a cluster, with the node it is of: see below) and
// the names of the batch a page ended in that it did not get to, so it
// survives other replicas and ends: SCAN visits every key that exists from
// start to end of the iteration, and may return a key twice, so a name can
// appear on two pages.
//
// A page never scans a batch again: SCAN from one cursor returns a different
// batch once keys have come and gone (its COUNT is of keys, whichever), so
// going back to a batch and skipping the names already listed skipped, too,
// names the batch now reached further on, which no later batch returns
// (TestListWhileLocksComeAndGo).
//
// On a cluster the masters are scanned one after another in the order of the
// first slot each serves, and the cursor names its node by that slot (and a
// hash of the node's address), not by its place in a list of addresses: after
// a failover the promoted replica serves the same slots, so the listing goes on
// with it, scanning it from the start (a SCAN cursor means nothing on another
// node), and no shard is skipped or done twice (TestListingAcrossAFailoverListsEveryHeldLock).

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
// (possibly with fewer locks than asked, and a cursor to go on). listMaxRest
// bounds the bytes of names a cursor carries: a batch with more names left
// over than that is scanned again, before any of it is listed, with a smaller
// COUNT.
const listScanCount, listMaxScans, listMaxRest = 1000, 20, 2048

// listCursor is where a page ends: a node, the SCAN cursor of the next batch
// (node == the number of nodes once all are scanned), and the names of the
// last batch the page did not get to, in name order (lock names have no ',').
// A cursor of the first version (before v2-, one Redis only) has, instead of
// those names, the last name listed from the batch its SCAN cursor produced:
// that batch is scanned again for the names after it.
//
// Its text names the node "0" (one Redis), "s<first slot>.<id>" (a cluster's
// master) or "end" (every node scanned, names of the last batch left).
type listCursor struct {
	node  int    // the node's place in scanNodes (resolved from first on a cluster)
	first int    // cluster: the first slot the node serves; -1 on one Redis
	id    string // cluster: the hash of the node's address
	scan  uint64
	rest  []string
	after string // a first-version cursor only
}

const listCursorV2 = "v2-"

func (c listCursor) String(nodes []scanNode) string {
	node := "0"
	switch {
	case c.node >= len(nodes):
		node = "end"
	case c.first >= 0:
		node = "s" + strconv.Itoa(c.first) + "." + c.id
	}
	return listCursorV2 + node + "-" + strconv.FormatUint(c.scan, 10) + "-" +
		base64.RawURLEncoding.EncodeToString([]byte(strings.Join(c.rest, ",")))
}

// parseListCursor reads a cursor and finds its node among nodes: on a
// cluster, the one serving its first slot now, from the start of its SCAN if
// that is another node than the cursor's.
func parseListCursor(s string, nodes []scanNode) (listCursor, error) {
	v2 := strings.HasPrefix(s, listCursorV2)
	f := strings.SplitN(strings.TrimPrefix(s, listCursorV2), "-", 3)
	if len(f) != 3 {
		return listCursor{}, ErrBadCursor
	}
	scan, err2 := strconv.ParseUint(f[1], 10, 64)
	tail, err3 := base64.RawURLEncoding.DecodeString(f[2])
	if err2 != nil || err3 != nil {
		return listCursor{}, ErrBadCursor
	}
	c := listCursor{first: -1, scan: scan}
	switch {
	case !v2:
		c.after = string(tail)
	case len(tail) > 0:
		c.rest = strings.Split(string(tail), ",")
		for _, name := range c.rest {
			if !lockNameChars(name) {
				return listCursor{}, ErrBadCursor
			}
		}
	}
	cluster := nodes[0].first >= 0
	switch {
	case v2 && f[0] == "end":
		if scan != 0 {
			return listCursor{}, ErrBadCursor
		}
		c.node = len(nodes)
		return c, nil
	case !cluster:
		if f[0] != "0" {
			return listCursor{}, ErrBadCursor
		}
		return c, nil
	case !v2:
		// A first-version cursor named a cluster's node by its place among
		// addresses, which says nothing now: start again.
		return listCursor{}, ErrBadCursor
	}
	first, id, ok := strings.Cut(strings.TrimPrefix(f[0], "s"), ".")
	n, err := strconv.Atoi(first)
	if !ok || !strings.HasPrefix(f[0], "s") || err != nil || n < 0 || n >= 16384 {
		return listCursor{}, ErrBadCursor
	}
	c.node = -1
	for i, nd := range nodes {
		if nd.serves(n) {
			c.node = i
		}
	}
	if c.node < 0 {
		return listCursor{}, fmt.Errorf("list: %w: no node serves slot %d", ErrUnavailable, n)
	}
	if nodes[c.node].id != id { // another node: a failover; its SCAN anew
		c.scan = 0
	}
	c.first, c.id = nodes[c.node].first, nodes[c.node].id
	return c, nil
}

// lockNameChars reports whether name could be a lock name: 1 to 200 of the
// characters NameChars allows (so never a '{' or '}' that would make its keys
// someone else's).
func lockNameChars(name string) bool {
	return len(name) > 0 && len(name) <= 200 && NameChars(name)
}

// NameChars reports whether s holds only the characters lock names may have:
// A-Z, a-z, 0-9, '.', '_', ':' and '-'. The one definition of that set; the
// HTTP layer adds the length and the dot-segments.
func NameChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
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
	limit := r.Limit
	if limit <= 0 {
		limit = math.MaxInt // as many as listMaxScans batches hold
	}
	var page ListPage
	// take lists the held or queued locks among names (in name order) until the
	// page is full, and returns the names it did not get to.
	take := func(names []string) ([]string, error) {
		states, err := s.states(ctx, names)
		if err != nil {
			return nil, err
		}
		for i, st := range states {
			if !st.Held && st.Waiters == 0 {
				continue
			}
			page.Locks = append(page.Locks, st)
			if len(page.Locks) == limit {
				return names[i+1:], nil
			}
		}
		return nil, nil
	}
	// The names a cursor carries are checked as a scan's are: a cursor made up
	// lists nothing the asker could not list anyway.
	var rest []string
	for _, name := range at.rest {
		if strings.HasPrefix(name, r.Prefix) && (r.Visible == nil || r.Visible(name)) {
			rest = append(rest, name)
		}
	}
	if rest, err = take(rest); err != nil {
		return ListPage{}, err
	}
	match := s.opt.Prefix + ":{" + r.Prefix + "*}"
	count := int64(listScanCount)
	for scans := 0; len(rest) == 0 && len(page.Locks) < limit && at.node < len(nodes) && scans < listMaxScans; scans++ {
		// A scan takes a turn as a script call does: else a burst of
		// listings takes the connections the turns count on.
		if err := nodes[at.node].turns.enter(ctx); err != nil {
			return ListPage{}, fmt.Errorf("list: %w", err)
		}
		keys, next, err := nodes[at.node].c.Scan(ctx, at.scan, match, count).Result()
		nodes[at.node].turns.leave(err == nil)
		if err != nil {
			return ListPage{}, s.storeErr("list", err)
		}
		var names []string
		for _, k := range keys {
			name := strings.TrimSuffix(strings.TrimPrefix(k, s.opt.Prefix+":{"), "}")
			if name > at.after && (r.Visible == nil || r.Visible(name)) {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		names = slices.Compact(names)
		if room := limit - len(page.Locks); len(names) > room && count > 1 && restSize(names[room:]) > listMaxRest {
			count = max(1, count/8) // too much to carry over: a smaller batch
			continue
		}
		if rest, err = take(names); err != nil {
			return ListPage{}, err
		}
		at.scan, at.after = next, ""
		if at.scan == 0 {
			if at.node++; at.node < len(nodes) {
				at.first, at.id = nodes[at.node].first, nodes[at.node].id
			}
		}
	}
	if len(rest) == 0 && at.node == len(nodes) {
		return page, nil // the end
	}
	at.rest = rest
	page.Next = at.String(nodes)
	return page, nil
}

// restSize is the bytes names take in a cursor.
func restSize(names []string) int {
	n := 0
	for _, name := range names {
		n += len(name) + 1
	}
	return n
}

// scanNode is a Redis server to scan; on a cluster, a master and the slots it
// serves.
type scanNode struct {
	c      redis.Cmdable
	turns  *turns // its turns on the connections (admission.go)
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
		return []scanNode{{c: s.rdb, turns: s.adm.of(""), first: -1}}, nil
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
			n = &scanNode{c: s.topo.Node(addr), turns: s.adm.of(addr), first: r.Start, id: strconv.FormatUint(uint64(h.Sum32()), 36)}
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
	keys, args := make([][]string, len(names)), make([][]any, len(names))
	for i, n := range names {
		keys[i], args[i] = []string{s.lockKey(n)}, lua.StateArgs{}.List()
	}
	cmds := s.execPipelined(ctx, s.ss.state, keys, args)
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
