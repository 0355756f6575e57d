package lua

// Each script's ARGV as a type, in the order its header lists them: the argv
// tag is the position, and List the ARGV. TestHeadersMatchArgs holds the two
// together.

// AcquireArgs are acquire.lua's ARGV.
type AcquireArgs struct {
	NotAfter    string `argv:"1"`
	Mode        string `argv:"2"` // "new" | "fair" | "reenter"
	Lease       string `argv:"3"` // lease hash
	TTL         int64  `argv:"4"`
	Owner       string `argv:"5"`
	By          string `argv:"6"`
	Shared      string `argv:"7"` // "1" | "0" | "" (a re-entry that did not say)
	Limit       string `argv:"8"`
	Maker       string `argv:"9"`
	Ticket      string `argv:"10"` // ticket hash
	TicketLease string `argv:"11"` // the lease hash the ticket is granted under
	TicketTTL   int64  `argv:"12"`
	Poll        int64  `argv:"13"`
	PollID      string `argv:"14"`
	Wait        int64  `argv:"15"`
	Record      string `argv:"16"`
	Body        string `argv:"17"`
	Remaining   string `argv:"18"` // the session's remaining ms, or ""
	Session     string `argv:"19"` // the session's hash
	Member      string `argv:"20"`
}

// List is the ARGV, in order.
func (a AcquireArgs) List() []any {
	return []any{a.NotAfter, a.Mode, a.Lease, a.TTL, a.Owner, a.By, a.Shared, a.Limit, a.Maker, a.Ticket,
		a.TicketLease, a.TicketTTL, a.Poll, a.PollID, a.Wait, a.Record, a.Body, a.Remaining, a.Session, a.Member}
}

// ReleaseArgs are release.lua's ARGV.
type ReleaseArgs struct {
	NotAfter string `argv:"1"`
	Lease    string `argv:"2"`
	By       string `argv:"3"`
	All      bool   `argv:"4"`
}

// List is the ARGV, in order.
func (a ReleaseArgs) List() []any { return []any{a.NotAfter, a.Lease, a.By, Flag(a.All)} }

// RenewArgs are renew.lua's ARGV.
type RenewArgs struct {
	NotAfter string `argv:"1"`
	Lease    string `argv:"2"`
	TTL      int64  `argv:"3"` // 0: the ttl of the last grant or renewal
	By       string `argv:"4"`
}

// List is the ARGV, in order.
func (a RenewArgs) List() []any { return []any{a.NotAfter, a.Lease, a.TTL, a.By} }

// ForceArgs are force.lua's ARGV.
type ForceArgs struct {
	NotAfter string `argv:"1"`
}

// List is the ARGV, in order.
func (a ForceArgs) List() []any { return []any{a.NotAfter} }

// StateArgs are state.lua's ARGV.
type StateArgs struct {
	Lease string `argv:"1"` // "" for the lock's state
	By    string `argv:"2"`
	Watch int64  `argv:"3"`
}

// List is the ARGV, in order.
func (a StateArgs) List() []any { return []any{a.Lease, a.By, a.Watch} }

// PollArgs are poll.lua's ARGV.
type PollArgs struct {
	NotAfter    string `argv:"1"`
	Ticket      string `argv:"2"`
	TicketLease string `argv:"3"`
	Poll        int64  `argv:"4"`
	By          string `argv:"5"`
	PollID      string `argv:"6"`
}

// List is the ARGV, in order.
func (a PollArgs) List() []any {
	return []any{a.NotAfter, a.Ticket, a.TicketLease, a.Poll, a.By, a.PollID}
}

// CancelArgs are cancel.lua's ARGV.
type CancelArgs struct {
	NotAfter    string `argv:"1"`
	Ticket      string `argv:"2"`
	TicketLease string `argv:"3"`
	By          string `argv:"4"`
}

// List is the ARGV, in order.
func (a CancelArgs) List() []any { return []any{a.NotAfter, a.Ticket, a.TicketLease, a.By} }

// PokeArgs are poke.lua's ARGV.
type PokeArgs struct{}

// List is the ARGV, in order.
func (PokeArgs) List() []any { return nil }

// UndoArgs are undo.lua's ARGV.
type UndoArgs struct {
	Mode        string `argv:"1"` // what becomes of the ticket: "drop" | "poll" | ""
	Lease       string `argv:"2"`
	Ticket      string `argv:"3"`
	TicketLease string `argv:"4"`
	Maker       string `argv:"5"`
	PollID      string `argv:"6"`
	By          string `argv:"7"`
	TicketTTL   int64  `argv:"8"`
	Record      string `argv:"9"`
}

// List is the ARGV, in order.
func (a UndoArgs) List() []any {
	return []any{a.Mode, a.Lease, a.Ticket, a.TicketLease, a.Maker, a.PollID, a.By, a.TicketTTL, a.Record}
}

// SessionHoldsArgs are session_holds.lua's: its fixed ARGV, then three hashes
// per member.
type SessionHoldsArgs struct {
	NotAfter string `argv:"1"`
	Op       string `argv:"2"` // "renew" | "end" | "look"
	By       string `argv:"3"`
	TTL      int64  `argv:"4"`
	Members  []MemberHashes
}

// MemberHashes are a session member's hashes: its lease, its ticket, and the
// lease that ticket is granted under.
type MemberHashes struct{ Lease, Ticket, TicketLease string }

// List is the ARGV, in order.
func (a SessionHoldsArgs) List() []any {
	l := make([]any, 0, 4+3*len(a.Members))
	l = append(l, a.NotAfter, a.Op, a.By, a.TTL)
	for _, m := range a.Members {
		l = append(l, m.Lease, m.Ticket, m.TicketLease)
	}
	return l
}

// Flag is a boolean as the scripts read it.
func Flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// SessionCreateArgs are session_create.lua's ARGV.
type SessionCreateArgs struct {
	By    string `argv:"1"`
	TTL   int64  `argv:"2"`
	Owner string `argv:"3"`
	Body  string `argv:"4"` // "" without an Idempotency-Key
	Nonce string `argv:"5"` // the same in every attempt of one request
}

// List is the ARGV, in order.
func (a SessionCreateArgs) List() []any { return []any{a.By, a.TTL, a.Owner, a.Body, a.Nonce} }

// SessionByArgs are the ARGV of session_get.lua, session_end.lua,
// session_check.lua and session_finish.lua: the principal asking.
type SessionByArgs struct {
	By string `argv:"1"`
}

// List is the ARGV, in order.
func (a SessionByArgs) List() []any { return []any{a.By} }

// SessionJoinArgs are session_join.lua's ARGV.
type SessionJoinArgs struct {
	By      string `argv:"1"`
	Member  string `argv:"2"`
	Pending int64  `argv:"3"`
}

// List is the ARGV, in order.
func (a SessionJoinArgs) List() []any { return []any{a.By, a.Member, a.Pending} }

// SessionLeaveArgs are session_leave.lua's ARGV: its fixed ARGV, then members.
type SessionLeaveArgs struct {
	How     string `argv:"1"` // "now" | "pruned"
	Members []string
}

// List is the ARGV, in order.
func (a SessionLeaveArgs) List() []any {
	l := make([]any, 0, 1+len(a.Members))
	l = append(l, a.How)
	for _, m := range a.Members {
		l = append(l, m)
	}
	return l
}

// SessionRenewArgs are session_renew.lua's ARGV.
type SessionRenewArgs struct {
	By  string `argv:"1"`
	TTL int64  `argv:"2"` // 0: the session's last ttl
}

// List is the ARGV, in order.
func (a SessionRenewArgs) List() []any { return []any{a.By, a.TTL} }
