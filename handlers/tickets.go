package handlers

import (
	"context"
	"net/http"

	"github.com/rs/zerolog"

	"github.com/batonhq/baton/store"
)

// poll serves GET /v1/locks/{name}/tickets/{ticket}: 200 with the lease once
// granted, 202 with the ticket while it waits.
func (s *server) poll() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, err := lockName(r)
		var p longPoll
		if err == nil {
			p, err = s.longPoll(r, false)
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		p.apply(w)
		t := ref(r, name, "ticket")
		s.serveWait(w, r, p.wait, func(ctx context.Context, done func(reply)) {
			s.store.PollFunc(ctx, t, p.wait, func(res store.PollResult, err error) {
				done(func(w http.ResponseWriter, log *zerolog.Logger) {
					switch {
					case err != nil:
						writeError(w, log, err)
					case res.Lease != nil:
						writeJSON(w, http.StatusOK, viewLease(res.Lease))
					default:
						writeJSON(w, http.StatusAccepted, viewTicket(res.Ticket))
					}
				})
			})
		})
	})
}

// cancel serves DELETE /v1/locks/{name}/tickets/{ticket}.
func (s *server) cancel() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, err := readRequest(w, r, nil)
		if err == nil {
			err = s.store.Cancel(r.Context(), ref(r, name, "ticket"))
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
