package lua

import (
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Every script's header names its KEYS, ARGV and replies; the Go type of its
// ARGV must list the same positions in the same order, and every reply code
// the script returns must be in its header.
func TestHeadersMatchArgs(t *testing.T) {
	byOp := map[string]struct {
		args any
		keys int
	}{
		"acquire":        {AcquireArgs{}, 1},
		"release":        {ReleaseArgs{}, 1},
		"renew":          {RenewArgs{}, 1},
		"force":          {ForceArgs{}, 1},
		"state":          {StateArgs{}, 1},
		"poll":           {PollArgs{}, 1},
		"cancel":         {CancelArgs{}, 1},
		"poke":           {PokeArgs{}, 1},
		"undo":           {UndoArgs{}, 1},
		"session_holds":  {SessionHoldsArgs{}, 1},
		"session_create": {SessionCreateArgs{}, 2},
		"session_get":    {SessionByArgs{}, 2},
		"session_end":    {SessionByArgs{}, 2},
		"session_check":  {SessionByArgs{}, 2},
		"session_finish": {SessionByArgs{}, 2},
		"session_join":   {SessionJoinArgs{}, 2},
		"session_leave":  {SessionLeaveArgs{}, 2},
		"session_renew":  {SessionRenewArgs{}, 2},
	}
	for op, src := range Ops {
		t.Run(op, func(t *testing.T) {
			want, ok := byOp[op]
			if !ok {
				t.Fatalf("no ARGV type for %s", op)
			}
			h := parseHeader(t, src)
			if h.keys != want.keys {
				t.Errorf("header names %d KEYS, the store passes %d", h.keys, want.keys)
			}
			tags := argvTags(t, want.args)
			if !slices.Equal(h.argv, tags) {
				t.Errorf("header ARGV %v, %T fields %v", h.argv, want.args, tags)
			}
			if n := len(want.args.(interface{ List() []any }).List()); n != len(tags) {
				t.Errorf("%T.List() has %d values, want %d", want.args, n, len(tags))
			}
			for _, code := range returnedCodes(src) {
				if !strings.Contains(h.replies, "'"+code+"'") {
					t.Errorf("returns {'%s', ...}, which its header's Replies do not name", code)
				}
			}
			if !strings.Contains(src, "local function "+op+"(KEYS, ARGV)") {
				t.Errorf("defines no function %s(KEYS, ARGV)", op)
			}
		})
	}
}

type header struct {
	keys    int
	argv    []int
	replies string
}

var (
	keyLine  = regexp.MustCompile(`^--\s+KEYS:(.*)`)
	argvNums = regexp.MustCompile(`(?:^--\s+(?:ARGV:\s+)?|, )(\d+) `)
)

func parseHeader(t *testing.T, src string) header {
	t.Helper()
	var h header
	section := ""
	for _, line := range strings.Split(src, "\n") {
		if !strings.HasPrefix(line, "--") {
			if section != "" {
				break
			}
			continue
		}
		switch {
		case keyLine.MatchString(line):
			section = "keys"
			h.keys = len(regexp.MustCompile(`(?:^|, )\d+ `).FindAllString(strings.TrimSpace(keyLine.FindStringSubmatch(line)[1])+" ", -1))
			continue
		case strings.HasPrefix(line, "-- ARGV:"):
			section = "argv"
			if strings.Contains(line, "none") {
				continue
			}
		case strings.HasPrefix(line, "-- Replies:"):
			section = "replies"
		}
		switch section {
		case "keys":
			if m := regexp.MustCompile(`^--\s+(\d+) `).FindStringSubmatch(line); m != nil {
				h.keys++
			}
		case "argv":
			for _, m := range argvNums.FindAllStringSubmatch(line, -1) {
				n, _ := strconv.Atoi(m[1])
				if len(h.argv) == 0 || n == h.argv[len(h.argv)-1]+1 {
					h.argv = append(h.argv, n)
				}
			}
		case "replies":
			h.replies += line + "\n"
		}
	}
	if section == "" {
		t.Fatal("no KEYS/ARGV/Replies header")
	}
	return h
}

// argvTags are the argv positions of v's fields, in field order.
func argvTags(t *testing.T, v any) []int {
	t.Helper()
	var tags []int
	typ := reflect.TypeOf(v)
	for i := range typ.NumField() {
		tag, ok := typ.Field(i).Tag.Lookup("argv")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(tag)
		if err != nil {
			t.Fatalf("%s.%s: argv tag %q", typ.Name(), typ.Field(i).Name, tag)
		}
		tags = append(tags, n)
	}
	return tags
}

// returnedCodes are the codes of the replies a script returns literally
// ("return {'code'", or a reply table made as "{'code'").
func returnedCodes(src string) []string {
	var codes []string
	for _, m := range regexp.MustCompile(`(?m)^[^-\n]*?(?:return|reply =|=) \{'([a-z_]+)'`).FindAllStringSubmatch(src, -1) {
		if !slices.Contains(codes, m[1]) {
			codes = append(codes, m[1])
		}
	}
	return codes
}
