package handlers

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/batonhq/baton/store"
)

// getLease serves GET /v1/locks/{name}/leases/{lease}.
func (s *server) getLease() http.Handler {
	return s.noBody(func(r *http.Request, name string) (any, error) {
		l, err := s.store.Lease(r.Context(), ref(r, name, "lease"))
		if err != nil {
			return nil, err
		}
		return viewLease(l), nil
	})
}

// renew serves PATCH /v1/locks/{name}/leases/{lease}.
func (s *server) renew() http.Handler {
	type request struct {
		TTLms *int64 `json:"ttl_ms"`
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req request
		name, err := readRequest(w, r, &req)
		ttl, err := s.limits.ttlOr(req.TTLms, err)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		l, err := s.store.Renew(r.Context(), ref(r, name, "lease"), ttl)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, viewLease(l))
	})
}

// release serves DELETE /v1/locks/{name}/leases/{lease}.
func (s *server) release() http.Handler {
	return s.noBody(func(r *http.Request, name string) (any, error) {
		rel, err := s.store.Release(r.Context(), ref(r, name, "lease"))
		if err != nil {
			return nil, err
		}
		return releaseView{Name: rel.Name, Count: rel.Count, Released: rel.Released}, nil
	})
}

// noBody serves a lease route that takes no body and no query parameters: it checks
// the lock name and the query, then answers 200 with what call returns.
func (s *server) noBody(call func(r *http.Request, name string) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, err := readRequest(w, r, nil)
		var v any
		if err == nil {
			v, err = call(r, name)
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	})
}

// ref names the lease or ticket in the path parameter param of a lock route, as
// asked for by the request's principal.
func ref(r *http.Request, name, param string) store.Ref {
	return store.Ref{Name: name, ID: chi.URLParam(r, param), By: principalID(r), Caps: capsOf(r)}
}
