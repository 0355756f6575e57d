package handlers

import (
	"net/http"

	"github.com/batonhq/baton/store"
)

// acquire serves POST /v1/locks/{name}: grant (201), re-entry (200), queued (202).
func (s *server) acquire() http.Handler {
	type request struct {
		TTLms  *int64  `json:"ttl_ms"`
		WaitMs *int64  `json:"wait_ms"`
		Fair   bool    `json:"fair"`
		Owner  *string `json:"owner"`
		Lease  *string `json:"lease"`
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req request
		name, err := readRequest(w, r, &req)
		var ar store.AcquireRequest
		var applied string
		if err == nil {
			ar, applied, err = s.acquireRequest(r, name, req.TTLms, req.WaitMs, req.Fair, req.Owner, req.Lease)
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if applied != "" {
			w.Header().Set("Preference-Applied", applied)
		}
		res, err := s.store.Acquire(r.Context(), ar)
		switch {
		case err != nil:
			s.fail(w, r, err)
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
	})
}

func (s *server) acquireRequest(r *http.Request, name string, ttlMs, waitMs *int64, fair bool, owner, lease *string) (store.AcquireRequest, string, error) {
	ttl, err := s.limits.ttl(ttlMs, s.limits.DefaultTTL)
	if err != nil {
		return store.AcquireRequest{}, "", err
	}
	wait, applied, err := s.limits.wait(r, waitMs)
	if err != nil {
		return store.AcquireRequest{}, "", err
	}
	ar := store.AcquireRequest{Name: name, TTL: ttl, Wait: wait, Fair: fair}
	if owner != nil {
		if err := checkLabel("owner", *owner); err != nil {
			return ar, "", err
		}
		ar.Owner = *owner
	}
	if lease != nil {
		if *lease == "" {
			return ar, "", invalid("lease", "must not be empty")
		}
		if fair {
			return ar, "", invalid("fair", "cannot be combined with lease: a re-entry never queues")
		}
		ar.Lease = *lease
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
		st, err := s.store.Watch(r.Context(), name, p.fence, p.wait)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, viewState(st))
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
		writeJSON(w, http.StatusOK, forceView{Name: name, Released: released})
	})
}
