package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/rs/zerolog"

	"github.com/batonhq/baton/auth"
	"github.com/batonhq/baton/store"
)

// acquire serves POST /v1/locks/{name}: grant (201), re-entry (200), queued (202).
func (s *server) acquire() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req acquireBody
		name, err := readRequest(w, r, &req)
		var ar store.AcquireRequest
		var applied string
		if err == nil {
			ar, applied, err = s.acquireRequest(r, name, req)
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if applied != "" {
			w.Header().Set("Preference-Applied", applied)
		}
		mayRead := principalOf(r) == nil || principalOf(r).Can(auth.ActionRead, name)
		s.serveWait(w, r, ar.Wait, func(ctx context.Context, done func(reply)) {
			s.store.AcquireFunc(ctx, ar, func(res store.AcquireResult, err error) {
				var held *store.HeldError
				if !mayRead && errors.As(err, &held) {
					err = errHeldUnseen // a key that may not read the lock learns nothing of its holder
				}
				err = keyCapError(r, err)
				done(func(w http.ResponseWriter, log *zerolog.Logger) { writeAcquired(w, log, res, err) })
			})
		})
	})
}

// writeAcquired answers an acquire: grant (201), re-entry (200), queued (202).
func writeAcquired(w http.ResponseWriter, log *zerolog.Logger, res store.AcquireResult, err error) {
	if err == nil {
		replayed(w, res.Replayed)
	}
	switch {
	case err != nil:
		writeError(w, log, err)
	case res.Ticket != nil:
		v := viewTicket(res.Ticket)
		w.Header().Set("Location", v.URL)
		writeJSON(w, http.StatusAccepted, v)
	case res.Reentered:
		writeJSON(w, http.StatusOK, viewLease(res.Lease))
	default:
		v := viewLease(res.Lease)
		w.Header().Set("Location", v.URL)
		writeJSON(w, http.StatusCreated, v)
	}
}

// acquireBody is the body of POST /v1/locks/{name}.
type acquireBody struct {
	TTLms   *int64  `json:"ttl_ms"`
	WaitMs  *int64  `json:"wait_ms"`
	Fair    bool    `json:"fair"`
	Owner   *string `json:"owner"`
	Lease   *string `json:"lease"`
	Shared  *bool   `json:"shared"`
	Limit   *int64  `json:"limit"`
	Session *string `json:"session"`
}

// maxLimit bounds a shared hold's limit: past it, "no limit" says the same.
const maxLimit = 1_000_000_000

func (s *server) acquireRequest(r *http.Request, name string, b acquireBody) (store.AcquireRequest, string, error) {
	ttl, err := s.limits.ttl(b.TTLms, s.limits.DefaultTTL)
	if err != nil {
		return store.AcquireRequest{}, "", err
	}
	wait, applied, err := s.limits.wait(r, b.WaitMs)
	if err != nil {
		return store.AcquireRequest{}, "", err
	}
	ar := store.AcquireRequest{Name: name, TTL: ttl, Wait: wait, Fair: b.Fair, By: principalID(r), Caps: capsOf(r)}
	if ar.IdemKey, err = idempotencyKey(r); err != nil {
		return ar, "", err
	}
	ar.BodyHash = bodySum(r)
	if b.Session != nil {
		switch {
		case *b.Session == "":
			return ar, "", invalid("session", "must not be empty")
		case b.TTLms != nil:
			return ar, "", invalid("ttl_ms", "cannot be combined with session: a session's hold lasts as long as the session")
		case b.Lease != nil:
			return ar, "", invalid("session", "cannot be combined with lease: a re-entry keeps its hold where it is")
		}
		ar.Session = *b.Session
	}
	if b.Owner != nil {
		if err := checkLabel("owner", *b.Owner); err != nil {
			return ar, "", err
		}
		ar.Owner = *b.Owner
	}
	if b.Shared != nil {
		ar.Shared, ar.ModeGiven = *b.Shared, true
	}
	if b.Limit != nil {
		switch {
		case !ar.Shared:
			return ar, "", invalid("limit", "only with shared: true (a limit counts shared holds)")
		case *b.Limit < 1 || *b.Limit > maxLimit:
			return ar, "", invalid("limit", fmt.Sprintf("must be between 1 and %d", maxLimit))
		}
		ar.Limit = int(*b.Limit)
	}
	if b.Lease != nil {
		switch {
		case *b.Lease == "":
			return ar, "", invalid("lease", "must not be empty")
		case b.Fair:
			return ar, "", invalid("fair", "cannot be combined with lease: a re-entry never queues")
		case b.Limit != nil:
			return ar, "", invalid("limit", "cannot be combined with lease: a re-entry keeps its hold's limit")
		}
		ar.Lease = *b.Lease
	}
	return ar, applied, nil
}

// state serves GET /v1/locks/{name}, and its long-poll watch with wait_ms.
func (s *server) state() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, err := lockName(r)
		var p longPoll
		if err == nil {
			p, err = s.longPoll(r, true)
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		p.apply(w)
		s.serveWait(w, r, p.wait, func(ctx context.Context, done func(reply)) {
			s.store.WatchFunc(ctx, name, p.fence, p.wait, func(st store.State, err error) {
				done(func(w http.ResponseWriter, log *zerolog.Logger) {
					if err != nil {
						writeError(w, log, err)
						return
					}
					writeJSON(w, http.StatusOK, viewState(st))
				})
			})
		})
	})
}

// force serves DELETE /v1/locks/{name}?force=true.
func (s *server) force() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, err := lockName(r)
		if err == nil {
			err = checkQuery(r, "force")
		}
		if err == nil && r.URL.Query().Get("force") != "true" {
			err = invalid("force", "must be true: releasing a lock you do not hold needs force=true")
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		released, err := s.store.Force(r.Context(), name)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		s.audit(r, principalOf(r).Name(), "force", nil)
		writeJSON(w, http.StatusOK, forceView{Name: name, Released: released})
	})
}
