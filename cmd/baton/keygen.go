package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/batonhq/baton/auth"
)

// defaultAllow is the grant of a key made without --allow: the everyday rights,
// not admin (force release) and not metrics.
const defaultAllow = "*=lock,read"

const keygenUsage = `usage: baton keygen NAME [--allow 'GLOB=ACTION,ACTION']...

Makes a new API key for the principal NAME (1 to 64 of a-z 0-9 . _ -), prints
it once, and prints the entry to add to the keys: list of the keys file
(BATON_AUTH_FILE). The file holds only the key's SHA-256: the key cannot be
shown again, so store it now (a secret manager, or BATON_API_KEY for clients).

  --allow 'GLOB=ACTION,ACTION'   a grant; repeat for more. GLOB matches lock
                                 names (* any run of characters, ? one);
                                 ACTION is lock, read, admin (force release;
                                 includes lock and read) or metrics.
                                 Default: '` + defaultAllow + `'.

Example:
  baton keygen billing-web --allow 'billing:*=lock,read' --allow '*=metrics'
`

// keygen is `baton keygen`.
func keygen(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("keygen", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {}
	// StringArray, not StringSlice: a grant's own commas must not split it.
	allow := fs.StringArray("allow", nil, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprint(stdout, keygenUsage)
			return exitOK
		}
		return usageError(stderr, err.Error())
	}
	if fs.NArg() != 1 {
		return usageError(stderr, "give exactly one NAME")
	}
	name := fs.Arg(0)
	specs := *allow
	if len(specs) == 0 {
		specs = []string{defaultAllow}
	}
	grants := make([]auth.Grant, 0, len(specs))
	for _, s := range specs {
		g, err := auth.ParseAllow(s)
		if err != nil {
			return usageError(stderr, "--allow: "+err.Error())
		}
		grants = append(grants, g)
	}
	key := auth.NewKey()
	entry, err := auth.FileEntry(name, auth.KeySHA256(key), grants)
	if err != nil {
		return usageError(stderr, err.Error())
	}
	fmt.Fprintf(stderr, "The key for %s. Store it now: it is shown only this once, and Baton keeps only its SHA-256.\n", name)
	fmt.Fprintln(stdout, key)
	if len(*allow) == 0 {
		fmt.Fprintf(stderr, "\nNo --allow given: the key may lock and read every lock name ('%s').\n", defaultAllow)
	}
	fmt.Fprintln(stderr, "\nAdd this entry to the keys: list of your keys file (BATON_AUTH_FILE); Baton reads it again within 10 s, or at once on SIGHUP:")
	fmt.Fprint(stdout, entry)
	return exitOK
}

func usageError(stderr io.Writer, msg string) int {
	fmt.Fprintf(stderr, "baton keygen: %s\n\n%s", msg, keygenUsage)
	return exitUsage
}
