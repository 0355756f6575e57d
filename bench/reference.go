package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// refPrefix is baton-ref's BATON_KEY_PREFIX: its keys and channels stay apart
// from the Baton under test's on the shared redis-server.
const refPrefix = "ref"

// buildRef builds the server of commit ref and returns the binary's path. It
// copies that commit's tree out of the repository with git archive, so that no
// worktree is registered (the repository may be shared) and nothing is left
// behind: the copy is in the run's temporary directory.
func (e *env) buildRef(ctx context.Context, ref string) (string, error) {
	src := filepath.Join(e.dir, "ref-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	archive := filepath.Join(e.dir, "ref.tar")
	for _, args := range [][]string{
		{"git", "-C", e.root, "archive", "--format=tar", "-o", archive, ref + "^{commit}"},
		{"tar", "-xf", archive, "-C", src},
	} {
		if b, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("-ref %s: %s: %w\n%s(-ref none runs without the reference)", ref, strings.Join(args[:2], " "), err, b)
		}
	}
	bin := filepath.Join(e.dir, "baton-ref")
	if err := e.goBuild(ctx, src, bin); err != nil {
		return "", fmt.Errorf("-ref %s: %w", ref, err)
	}
	return bin, nil
}
