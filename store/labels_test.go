package store_test

import (
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/store"
)

// A pub/sub link's reader and writer carry the profiler labels that goroutine
// profiles show, which is how a leak check outside the process tells them
// from goroutines left behind.
func TestLinkGoroutinesCarryLabels(t *testing.T) {
	newStore(t, store.Options{}) // its link starts with it
	want := map[string]string{
		`# labels: {"baton":"pubsub-reader"}`: ".(*dispatcher).receive+",
		`# labels: {"baton":"pubsub-writer"}`: ".(*dispatcher).write+",
	}
	var dump strings.Builder
	for deadline := time.Now().Add(10 * time.Second); ; {
		dump.Reset()
		if err := pprof.Lookup("goroutine").WriteTo(&dump, 1); err != nil {
			t.Fatal(err)
		}
		missing := 0
		for label, fn := range want {
			found := false
			for _, group := range strings.Split(dump.String(), "\n\n") {
				found = found || strings.Contains(group, label) && strings.Contains(group, fn)
			}
			if !found {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the link's reader and writer are not both labelled after 10 s:\n%s", dump.String())
		}
		// The goroutines are started with the store but may not have run yet;
		// a profile is only visible by asking.
		time.Sleep(10 * time.Millisecond)
	}
}
