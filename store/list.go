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
// (with the node's place on a cluster) and the names of the batch a page ended
// in that it did not get to, so it survives other replicas and ends: SCAN
// visits every key that exists from start to end of the iteration, and may
// return a key twice, so a name can appear on two pages.
//
// A page never scans a batch again: SCAN from one cursor returns a different
// batch once keys have come and gone (its COUNT is of keys, whichever), so
// going back to a batch and skipping the names already listed skipped, too,
// names the batch now reached further on, which no later batch returns
// (TestListWhileLocksComeAndGo).

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
// A cursor of the first version (before v2-) has, instead of those names, the
// last name listed from the batch its SCAN cursor produced: that batch is
// scanned again for the names after it.
type listCursor struct {
	node  int
	scan  uint64
	rest  []string
	after string // a first-version cursor only
}

const listCursorV2 = "v2-"

func (c listCursor) String() string {
	return listCursorV2 + strconv.Itoa(c.node) + "-" + strconv.FormatUint(c.scan, 10) + "-" +
		base64.RawURLEncoding.EncodeToString([]byte(strings.Join(c.rest, ",")))
}

func parseListCursor(s string, nodes int) (listCursor, error) {
	v2 := strings.HasPrefix(s, listCursorV2)
	f := strings.SplitN(strings.TrimPrefix(s, listCursorV2), "-", 3)
	if len(f) != 3 {
		return listCursor{}, ErrBadCursor
	}
	node, err1 := strconv.Atoi(f[0])
	scan, err2 := strconv.ParseUint(f[1], 10, 64)
	tail, err3 := base64.RawURLEncoding.DecodeString(f[2])
	if err1 != nil || err2 != nil || err3 != nil || node < 0 || node > nodes || node == nodes && (!v2 || scan != 0) {
		return listCursor{}, ErrBadCursor
	}
	c := listCursor{node: node, scan: scan}
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
	return c, nil
}

// lockNameChars reports whether name could be a lock name: 1 to 200 of
// A-Z, a-z, 0-9, '.', '_', ':', '-' (so never a '{' or '}' that would make
// its keys someone else's).
func lockNameChars(name string) bool {
	if len(name) == 0 || len(name) > 200 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
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
	var at listCursor
	if r.Cursor != "" {
		if at, err = parseListCursor(r.Cursor, len(nodes)); err != nil {
			return ListPage{}, err
		}
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
			if len(page.Locks) == r.Limit {
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
	match := s.opt.Prefix + ":{" + r.Prefix + "*}:fence"
	count := int64(listScanCount)
	for scans := 0; len(rest) == 0 && len(page.Locks) < r.Limit && at.node < len(nodes) && scans < listMaxScans; scans++ {
		keys, next, err := nodes[at.node].Scan(ctx, at.scan, match, count).Result()
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
		if room := r.Limit - len(page.Locks); len(names) > room && count > 1 && restSize(names[room:]) > listMaxRest {
			count = max(1, count/8) // too much to carry over: a smaller batch
			continue
		}
		if rest, err = take(names); err != nil {
			return ListPage{}, err
		}
		at.scan, at.after = next, ""
		if at.scan == 0 {
			at.node++
		}
	}
	if len(rest) == 0 && at.node == len(nodes) {
		return page, nil // the end
	}
	at.rest = rest
	page.Next = at.String()
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
