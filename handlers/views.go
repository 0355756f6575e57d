package handlers

import (
	"encoding/json"
	"time"

	"github.com/batonhq/baton/store"
)

// Response bodies, as api/openapi.yaml describes them.

type leaseView struct {
	Name       string `json:"name"`
	Lease      string `json:"lease"`
	URL        string `json:"url"`
	Fence      int64  `json:"fence"`
	Count      int    `json:"count"`
	TTLms      int64  `json:"ttl_ms"`
	ExpiresAt  string `json:"expires_at"`
	Owner      string `json:"owner"`
	AcquiredAt string `json:"acquired_at"`
	Shared     bool   `json:"shared"`
	// Limit is a shared hold's limit (a number, or null for none); absent on
	// an exclusive hold.
	Limit any `json:"limit,omitempty"`
}

type ticketView struct {
	Name        string `json:"name"`
	Ticket      string `json:"ticket"`
	URL         string `json:"url"`
	Position    int    `json:"position"`
	TicketTTLms int64  `json:"ticket_ttl_ms"`
}

type stateView struct {
	Name      string     `json:"name"`
	Held      bool       `json:"held"`
	Owner     string     `json:"owner"`
	Count     int        `json:"count"`
	Fence     int64      `json:"fence"`
	TTLms     int64      `json:"ttl_ms"`
	ExpiresAt *string    `json:"expires_at"`
	Waiters   int        `json:"waiters"`
	Mode      string     `json:"mode"`
	Holders   int        `json:"holders"`
	Limit     *int       `json:"limit"`
	Holds     []holdView `json:"holds"`
}

type holdView struct {
	Owner     string `json:"owner"`
	Fence     int64  `json:"fence"`
	Count     int    `json:"count"`
	TTLms     int64  `json:"ttl_ms"`
	ExpiresAt string `json:"expires_at"`
	Shared    bool   `json:"shared"`
}

type releaseView struct {
	Name     string `json:"name"`
	Count    int    `json:"count"`
	Released bool   `json:"released"`
}

type forceView struct {
	Name     string `json:"name"`
	Released bool   `json:"released"`
}

func leaseURL(name, lease string) string   { return "/v1/locks/" + name + "/leases/" + lease }
func ticketURL(name, ticket string) string { return "/v1/locks/" + name + "/tickets/" + ticket }

// stamp is RFC 3339 with milliseconds, in UTC.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

func viewLease(l *store.Lease) leaseView {
	v := leaseView{
		Name: l.Name, Lease: l.ID, URL: leaseURL(l.Name, l.ID), Fence: l.Fence, Count: l.Count,
		TTLms: l.TTL.Milliseconds(), ExpiresAt: stamp(l.ExpiresAt), Owner: l.Owner, AcquiredAt: stamp(l.AcquiredAt),
		Shared: l.Shared,
	}
	if l.Shared {
		v.Limit = json.RawMessage("null")
		if l.Limit > 0 {
			v.Limit = l.Limit
		}
	}
	return v
}

func viewTicket(t *store.Ticket) ticketView {
	return ticketView{
		Name: t.Name, Ticket: t.ID, URL: ticketURL(t.Name, t.ID), Position: t.Position,
		TicketTTLms: t.TicketTTL.Milliseconds(),
	}
}

func viewState(s store.State) stateView {
	v := stateView{Name: s.Name, Held: s.Held, Owner: s.Owner, Count: s.Count, Fence: s.Fence,
		TTLms: s.TTL.Milliseconds(), Waiters: s.Waiters, Mode: s.Mode, Holders: s.Holders,
		Holds: make([]holdView, 0, len(s.Holds))}
	if s.Held {
		e := stamp(s.ExpiresAt)
		v.ExpiresAt = &e
	}
	if s.Mode == store.ModeShared && s.Limit > 0 {
		v.Limit = &s.Limit
	}
	for _, h := range s.Holds {
		v.Holds = append(v.Holds, holdView{Owner: h.Owner, Fence: h.Fence, Count: h.Count,
			TTLms: h.TTL.Milliseconds(), ExpiresAt: stamp(h.ExpiresAt), Shared: h.Shared})
	}
	return v
}
