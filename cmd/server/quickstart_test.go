package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// The README's curl blocks (between <!-- quickstart --> markers) run exactly as
// written against a server started as `make run` starts it (embedded store).
func TestREADMEQuickstart(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl not found: run `make test`, which installs it, or `apt-get install curl`")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)<!-- quickstart -->\\s*```sh\\n(.*?)```\\s*<!-- /quickstart -->").FindAllSubmatch(readme, -1)
	if len(blocks) != 5 {
		t.Fatalf("found %d quickstart blocks in README.md, want 5", len(blocks))
	}
	base, _ := startServe(t, testConfig())
	wants := [][]string{
		{`"name":"nightly-report"`, `"owner":"cron@db1"`, "/v1/locks/backup/leases/", "/problems/lock-held",
			`"ttl_ms":60000`, `"held":true`, `"released":true`, `"owner":"second"`},
		{`"position":1`, "/v1/locks/payroll/leases/", `"released":true`},
		{`"mode":"shared"`, `"holders":2`, `"owner":"reader-2"`, "/problems/lock-held", `"released":true`,
			"/problems/limit-mismatch", `"limit":2`},
		{`"name":"invoice:17"`, `"shared":true`, `"locks":2`, `"url":"/v1/locks/customer:9/leases/`, `"released":2`},
		{`"name":"export"`, "Idempotent-Replayed: true", "/problems/idempotency-key-mismatch"},
	}
	for i, b := range blocks {
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", string(b[1]))
		cmd.Env = append(os.Environ(), "BATON_URL="+base)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("quickstart block %d: %v\n%s", i+1, err, out)
		}
		for _, w := range wants[i] {
			if !strings.Contains(string(out), w) {
				t.Errorf("quickstart block %d: output lacks %s:\n%s", i+1, w, out)
			}
		}
		t.Logf("block %d output:\n%s", i+1, out)
	}
}
