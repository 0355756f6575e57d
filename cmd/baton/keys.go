package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"

	"github.com/batonhq/baton/auth"
)

const keysUsage = `usage: baton keys check [--uid UID] FILE

Checks a keys file (BATON_AUTH_FILE) as the server would load it, before it
is deployed: every error with its line, and whether anyone but its owner could
change it, which the server refuses (the file or its directory writable by
group or others, or owned by neither UID nor root). A good file's keys are
listed: name, credential, grants and limits (never a key: the file holds none).

  --uid UID   the user the server runs as (default: this user)

Exit status: 0 the server would load the file; 1 it would refuse it; 2 usage.
`

// keysCmd is `baton keys`: one subcommand, check.
func keysCmd(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("keys", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	uid := fs.Int("uid", os.Geteuid(), "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprint(stdout, keysUsage)
			return exitOK
		}
		return keysUsageError(stderr, err.Error())
	}
	if fs.NArg() != 2 || fs.Arg(0) != "check" {
		return keysUsageError(stderr, "give check and one FILE")
	}
	file := fs.Arg(1)
	keys, err := auth.ReadKeys(file)
	access := auth.CheckFileAccess(file, *uid)
	if err != nil || access != nil {
		fmt.Fprintln(stderr, errors.Join(err, access))
		fmt.Fprintf(stderr, "baton keys check: %s would be refused\n", file)
		return 1
	}
	fmt.Fprintf(stdout, "%s: %d keys, good\n", file, len(keys))
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for _, k := range keys {
		cred := "sha256 " + k.SHA256[:min(12, len(k.SHA256))] + "…"
		if k.CertCN != "" {
			cred = "cert_cn " + k.CertCN
		}
		if k.CertURI != "" {
			cred = "cert_uri " + k.CertURI
		}
		var grants []string
		for _, g := range k.Allow {
			grants = append(grants, g.String())
		}
		limits := ""
		if k.RatePerS > 0 {
			limits += " rate_per_s " + strconv.FormatFloat(k.RatePerS, 'g', -1, 64)
		}
		for _, c := range []struct {
			field string
			n     int
		}{{"max_waiters", k.MaxWaiters}, {"max_holds", k.MaxHolds}, {"max_tickets", k.MaxTickets}, {"max_sessions", k.MaxSessions}} {
			if c.n > 0 {
				limits += " " + c.field + " " + strconv.Itoa(c.n)
			}
		}
		row := "  " + k.Name + "\t" + cred + "\t" + strings.Join(grants, " ")
		if limits != "" {
			row += "\t" + strings.TrimSpace(limits)
		}
		fmt.Fprintln(tw, row)
	}
	_ = tw.Flush()
	if len(keys) == 0 {
		fmt.Fprintln(stderr, "warning: keys: [] refuses every request")
	}
	return exitOK
}

func keysUsageError(stderr io.Writer, msg string) int {
	fmt.Fprintf(stderr, "baton keys: %s\n\n%s", msg, keysUsage)
	return exitUsage
}
