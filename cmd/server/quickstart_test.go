package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// The curl blocks of the README's quickstart and of the guide (between
// <!-- quickstart --> markers) run exactly as written against a server started
// as `make run` starts it (embedded store).
func TestQuickstartCurlBlocksRunAsWritten(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl not found: run `make test`, which installs it, or `apt-get install curl`")
	}
	marked := regexp.MustCompile("(?s)<!-- quickstart -->\\s*```sh\\n(.*?)```\\s*<!-- /quickstart -->")
	type block struct {
		file string
		text string
	}
	var blocks []block
	for _, f := range []struct {
		path string
		want int
	}{{"../../README.md", 1}, {"../../docs/guide.md", 4}} {
		doc, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		found := marked.FindAllSubmatch(doc, -1)
		if len(found) != f.want {
			t.Fatalf("found %d quickstart blocks in %s, want %d", len(found), f.path, f.want)
		}
		for _, b := range found {
			blocks = append(blocks, block{file: f.path, text: string(b[1])})
		}
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
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", b.text)
		cmd.Env = append(os.Environ(), "BATON_URL="+base)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("quickstart block %d (%s): %v\n%s", i+1, b.file, err, out)
		}
		for _, w := range wants[i] {
			if !strings.Contains(string(out), w) {
				t.Errorf("quickstart block %d (%s): output lacks %s:\n%s", i+1, b.file, w, out)
			}
		}
		t.Logf("block %d (%s) output:\n%s", i+1, b.file, out)
	}
}
