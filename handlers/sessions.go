package handlers

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/batonhq/baton/auth"
	"github.com/batonhq/baton/store"
)

// Sessions (API.md, "Sessions: many holds, one heartbeat").

type sessionView struct {
	Session   string `json:"session"`
	URL       string `json:"url"`
	TTLms     int64  `json:"ttl_ms"`
	ExpiresAt string `json:"expires_at"`
	Owner     string `json:"owner"`
	Locks     int    `json:"locks"`
}

// sessionDetailView is a session with its holds (GET).
type sessionDetailView struct {
	sessionView
	Holds []sessionHoldView `json:"holds"`
}

type sessionHoldView struct {
	Name   string `json:"name"`
	URL    string `json:"url"`
	Fence  int64  `json:"fence"`
	Count  int    `json:"count"`
	Shared bool   `json:"shared"`
}

type sessionEndView struct {
	Session  string `json:"session"`
	Released int    `json:"released"`
}

func sessionURL(id string) string { return "/v1/sessions/" + id }

func viewSession(s store.Session) sessionView {
	return sessionView{Session: s.ID, URL: sessionURL(s.ID), TTLms: s.Remaining.Milliseconds(),
		ExpiresAt: stamp(s.ExpiresAt), Owner: s.Owner, Locks: s.Locks}
}

// sessionRef is the session of the path, as asked for by the request's principal.
func sessionRef(r *http.Request) store.Ref {
	return store.Ref{ID: chi.URLParam(r, "session"), By: principalID(r), Caps: capsOf(r)}
}

// createSession serves POST /v1/sessions.
func (s *server) createSession() http.Handler {
	type request struct {
		TTLms *int64  `json:"ttl_ms"`
		Owner *string `json:"owner"`
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req request
		err := checkQuery(r)
		if err == nil {
			err = decodeJSON(w, r, &req)
		}
		sr := store.SessionRequest{By: principalID(r), BodyHash: bodySum(r), Caps: capsOf(r)}
		if err == nil {
			sr.TTL, err = s.limits.ttl(req.TTLms, s.limits.DefaultTTL)
		}
		if err == nil && req.Owner != nil {
			err = checkLabel("owner", *req.Owner)
			sr.Owner = *req.Owner
		}
		if err == nil {
			sr.IdemKey, err = idempotencyKey(r)
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		sess, again, err := s.store.CreateSession(r.Context(), sr)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		replayed(w, again)
		v := viewSession(sess)
		w.Header().Set("Location", v.URL)
		writeJSON(w, http.StatusCreated, v)
	})
}

// getSession serves GET /v1/sessions/{session}: the session with its holds.
func (s *server) getSession() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkQuery(r); err != nil {
			s.fail(w, r, err)
			return
		}
		sess, err := s.store.GetSession(r.Context(), sessionRef(r))
		if err != nil {
			s.fail(w, r, err)
			return
		}
		v := sessionDetailView{sessionView: viewSession(sess), Holds: []sessionHoldView{}}
		for _, h := range sess.Holds {
			v.Holds = append(v.Holds, sessionHoldView{Name: h.Name, URL: leaseURL(h.Name, h.Lease), Fence: h.Fence,
				Count: h.Count, Shared: h.Shared})
		}
		writeJSON(w, http.StatusOK, v)
	})
}

// renewSession serves PATCH /v1/sessions/{session}.
func (s *server) renewSession() http.Handler {
	type request struct {
		TTLms *int64 `json:"ttl_ms"`
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req request
		err := checkQuery(r)
		if err == nil {
			err = decodeJSON(w, r, &req)
		}
		ttl, err := s.limits.ttlOr(req.TTLms, err)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		// Holds on names the key may no longer lock (a reload took the grant away)
		// are not renewed: they run out.
		var visible func(string) bool
		if p := principalOf(r); p != nil && !p.All() {
			visible = func(name string) bool { return p.Can(auth.ActionLock, name) }
		}
		sess, err := s.store.RenewSession(r.Context(), sessionRef(r), ttl, visible)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, viewSession(sess))
	})
}

// endSession serves DELETE /v1/sessions/{session}.
func (s *server) endSession() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkQuery(r); err != nil {
			s.fail(w, r, err)
			return
		}
		ref := sessionRef(r)
		n, err := s.store.EndSession(r.Context(), ref)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, sessionEndView{Session: ref.ID, Released: n})
	})
}
