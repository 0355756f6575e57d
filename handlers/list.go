package handlers

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/batonhq/baton/auth"
	"github.com/batonhq/baton/store"
)

// Listing locks: GET /v1/locks?prefix=P&limit=N&cursor=C.

const (
	defaultListLimit = 100
	maxListLimit     = 1000
)

type listView struct {
	Locks      []stateView `json:"locks"`
	NextCursor *string     `json:"next_cursor"`
}

// list serves GET /v1/locks: the held or queued locks whose names start with
// prefix and that the principal may read, a page at a time, in Redis's scan
// order.
func (s *server) list() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lr, err := listRequest(r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if p := principalOf(r); p != nil && !p.All() {
			lr.Visible = func(name string) bool { return p.Can(auth.ActionRead, name) }
		}
		page, err := s.store.List(r.Context(), lr)
		if errors.Is(err, store.ErrBadCursor) {
			err = invalid("cursor", "is not a cursor this API gave: start again without one")
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		v := listView{Locks: make([]stateView, 0, len(page.Locks))}
		for _, st := range page.Locks {
			v.Locks = append(v.Locks, viewState(st))
		}
		if page.Next != "" {
			v.NextCursor = &page.Next
		}
		writeJSON(w, http.StatusOK, v)
	})
}

func listRequest(r *http.Request) (store.ListRequest, error) {
	if err := checkQuery(r, "prefix", "limit", "cursor"); err != nil {
		return store.ListRequest{}, err
	}
	q := r.URL.Query()
	lr := store.ListRequest{Prefix: q.Get("prefix"), Limit: defaultListLimit, Cursor: q.Get("cursor")}
	if len(lr.Prefix) > 200 || !store.NameChars(lr.Prefix) {
		return lr, invalid("prefix", "must be the start of a lock name: at most 200 of A-Z, a-z, 0-9, '.', '_', ':', '-'")
	}
	n, err := queryInt(r, "limit")
	if err != nil {
		return lr, err
	}
	if n != nil {
		if *n < 1 || *n > maxListLimit {
			return lr, invalid("limit", fmt.Sprintf("must be between 1 and %d", maxListLimit))
		}
		lr.Limit = int(*n)
	}
	if q.Has("cursor") && lr.Cursor == "" {
		return lr, invalid("cursor", "must not be empty: leave it out to start")
	}
	return lr, nil
}
