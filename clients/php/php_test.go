// Package php_test runs the PHP client's PHPUnit suite (clients/php/tests)
// against a real Baton server on a real redis-server, started by
// internal/batontest with API keys and a fault-injecting proxy in front.
package php_test

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/batontest"
)

// TestPHPUnit runs PHPUnit on tests/ with the server's environment
// (batontest.Server.Env) and BATON_API_KEY set to the full key, and fails with
// PHPUnit's output. BATON_PHPUNIT_FILTER, when set, is passed as --filter.
func TestPHPUnit(t *testing.T) {
	phpunit := tools(t)
	s := batontest.Start(t, batontest.Options{Keys: true})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := []string{"--configuration", "phpunit.xml.dist"}
	if f := os.Getenv("BATON_PHPUNIT_FILTER"); f != "" {
		args = append(args, "--filter", f)
	}
	cmd := exec.CommandContext(ctx, phpunit, args...)
	cmd.Env = append(os.Environ(), s.Env()...)
	cmd.Env = append(cmd.Env, "BATON_API_KEY="+s.Keys.Full)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("phpunit: %v after %s\n%s", err, time.Since(start).Round(time.Millisecond), out)
	}
	t.Logf("phpunit in %s: %s", time.Since(start).Round(time.Millisecond), lastLine(out))

	// The client never prints the key, whatever the tests made it do.
	for name, key := range map[string]string{"full": s.Keys.Full, "limited": s.Keys.Limited, "reader": s.Keys.Reader} {
		if strings.Contains(string(out), key) {
			t.Errorf("the %s API key appears in PHPUnit's output", name)
		}
	}
}

// tools finds phpunit and checks php has ext-curl and Debian's Symfony Lock.
func tools(t *testing.T) string {
	t.Helper()
	const hint = "; run `make test`, which installs php-cli, php-curl, phpunit and php-symfony-lock"
	php, err := exec.LookPath("php")
	if err != nil {
		t.Fatal("php not found" + hint)
	}
	phpunit, err := exec.LookPath("phpunit")
	if err != nil {
		t.Fatal("phpunit not found" + hint)
	}
	check := exec.Command(php, "-r", `exit(extension_loaded("curl") && extension_loaded("json") ? 0 : 1);`)
	if err := check.Run(); err != nil {
		t.Fatal("php has no curl extension" + hint)
	}
	if _, err := os.Stat("/usr/share/php/Symfony/Component/Lock/LockFactory.php"); err != nil && !vendored() {
		t.Fatal("Symfony Lock not found" + hint)
	}
	return phpunit
}

// vendored reports whether `composer install` provided the dependencies.
func vendored() bool {
	_, err := os.Stat("vendor/symfony/lock/LockFactory.php")
	return err == nil
}

var closing = regexp.MustCompile(`(?m)^(OK .*|Tests: .*)$`)

func lastLine(out []byte) string {
	m := closing.FindAll(out, -1)
	if len(m) == 0 {
		return ""
	}
	return string(m[len(m)-1])
}
