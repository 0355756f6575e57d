package python_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/batontest"
)

// The Python client's pytest suite, against a real Baton (keys mode) behind the
// fault proxy, a second one in protected mode, and a control to restart the
// first. The suite runs with Debian's pytest, which `make test` installs.
func TestPythonClient(t *testing.T) {
	pytest := findPytest(t)
	keys := batontest.Start(t, batontest.Options{Keys: true})
	protected := batontest.Start(t, batontest.Options{})

	// POST /restart stops the keys-mode server and starts it again on the same
	// port (same Redis), answering once it is ready.
	restart := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/restart" {
			http.NotFound(w, r)
			return
		}
		if err := keys.Restart(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(restart.Close)

	src, err := filepath.Abs("src")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := append(pytest[1:], "-q", "-p", "no:cacheprovider", "tests")
	// BATON_PYTEST_ARGS: more pytest arguments, e.g. "-k fair -x" while working on the client.
	args = append(args, strings.Fields(os.Getenv("BATON_PYTEST_ARGS"))...)
	cmd := exec.CommandContext(ctx, pytest[0], args...)
	cmd.Env = append(withoutBaton(os.Environ()), keys.Env()...)
	cmd.Env = append(cmd.Env,
		"PYTHONPATH="+src,
		"PYTHONDONTWRITEBYTECODE=1",
		"BATON_TEST_PROTECTED_URL="+protected.URL,
		"BATON_TEST_RESTART_URL="+restart.URL+"/restart",
	)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest: %v after %s\n%s\nserver log:\n%s", err, time.Since(start).Round(time.Millisecond), out, keys.Logs())
	}
	summary := lastLines(string(out), 1)
	if testing.Verbose() {
		summary = string(out)
	}
	t.Logf("pytest passed in %s:\n%s", time.Since(start).Round(time.Millisecond), summary)
}

// findPytest is the command that runs pytest: Debian's pytest-3, or the
// python3 on PATH when it has pytest.
func findPytest(t *testing.T) []string {
	t.Helper()
	if p, err := exec.LookPath("pytest-3"); err == nil {
		return []string{p}
	}
	if py, err := exec.LookPath("python3"); err == nil {
		if exec.Command(py, "-c", "import pytest").Run() == nil {
			return []string{py, "-m", "pytest"}
		}
	}
	t.Fatal("pytest not found: run `make test`, which installs Debian's python3-pytest (scripts/need.sh), " +
		"or `apt-get install python3-pytest`")
	return nil
}

// withoutBaton drops the caller's BATON_* settings, so that a developer's own
// BATON_API_KEY or BATON_URL never leaks into the suite.
func withoutBaton(env []string) []string {
	var kept []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "BATON_") {
			kept = append(kept, kv)
		}
	}
	return kept
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
