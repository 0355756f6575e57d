package auth

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// maxFileSize bounds a keys file: about 50,000 keys.
const maxFileSize = 16 << 20

// Key is one entry of the keys file, validated.
type Key struct {
	Name       string  // the principal: ^[a-z0-9._-]{1,64}$
	SHA256     string  // lower-case hex SHA-256 of the key; exactly one of SHA256, CertCN and CertURI is set
	CertCN     string  // the common name of a client certificate
	CertURI    string  // a URI among a client certificate's subject alternative names (a SPIFFE ID, say)
	Allow      []Grant // at least one
	RatePerS   float64 // requests per second per process; 0: no limit
	MaxWaiters int     // long-polls at once per process; 0: no limit
	// MaxHolds, MaxTickets and MaxSessions cap the key's live objects in
	// Redis (Caps); 0: the server's default.
	MaxHolds, MaxTickets, MaxSessions int
	Line                              int // where the entry starts in its file
}

// Grant is one allow entry: actions on the lock names a glob matches.
type Grant struct {
	Names  Glob
	listed actionSet // as written
	set    actionSet // with what admin implies
}

// NewGrant returns a grant of actions over the names glob matches. It returns an
// error when actions is empty.
func NewGrant(names Glob, actions ...Action) (Grant, error) {
	if len(actions) == 0 {
		return Grant{}, errors.New("a grant needs at least one action")
	}
	g := Grant{Names: names}
	for _, a := range actions {
		if _, err := ParseAction(a.String()); err != nil {
			return Grant{}, err
		}
		g.listed |= actionSet(a)
		g.set = g.set.with(a)
	}
	return g, nil
}

// String is the grant as keygen's --allow takes it: GLOB=ACTION,ACTION, with
// the actions as written.
func (g Grant) String() string { return g.Names.String() + "=" + g.listed.String() }

// Actions returns the actions the grant allows, admin's implied ones included.
func (g Grant) Actions() []Action { return g.set.list() }

// Allows reports whether the grant allows a on the lock name.
func (g Grant) Allows(a Action, name string) bool { return g.set.has(a) && g.Names.Match(name) }

// FileError is one problem in a keys file, at a line when it has one.
type FileError struct {
	File string
	Line int // 0 when the problem is the whole file
	Msg  string
}

func (e *FileError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// ReadKeys reads and validates the keys file at path (JSON when its name ends in
// .json, YAML otherwise). Every error is a *FileError, or several joined
// (errors.Join), naming path and the line; none repeats a value that could be a
// key.
func ReadKeys(path string) ([]Key, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return ParseKeys(path, data)
}

// readFile reads a keys file, refusing what is not a regular file before opening
// it (opening a FIFO would block).
func readFile(path string) ([]byte, error) {
	fail := func(msg string) error { return &FileError{File: path, Msg: msg} }
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fail("cannot read the keys file: " + osReason(err))
	}
	switch {
	case fi.IsDir():
		return nil, fail("is a directory, not a keys file")
	case !fi.Mode().IsRegular():
		return nil, fail(fmt.Sprintf("is not a regular file (%s)", fi.Mode().Type()))
	case fi.Size() > maxFileSize:
		return nil, fail(fmt.Sprintf("is %d bytes, more than a keys file may be (%d)", fi.Size(), maxFileSize))
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fail("cannot read the keys file: " + osReason(err))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fail("cannot read the keys file: " + osReason(err))
	}
	if len(data) > maxFileSize {
		return nil, fail(fmt.Sprintf("is more than a keys file may be (%d bytes)", maxFileSize))
	}
	return data, nil
}

// osReason returns what went wrong without the path, which the FileError names.
func osReason(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return err.Error()
}

// ParseKeys validates a keys file's content; file names it in errors and picks
// the format (JSON for a name ending in .json, YAML otherwise). It returns the
// same errors as ReadKeys.
func ParseKeys(file string, data []byte) ([]Key, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &FileError{File: file, Msg: "the file is empty: it needs a keys: list (baton keygen prints entries for it)"}
	}
	p := &parser{file: file}
	root, err := p.decode(strings.EqualFold(filepath.Ext(file), ".json"), data)
	if err != nil {
		return nil, err
	}
	keys := p.file_(root)
	if len(p.errs) > 0 {
		return nil, p.err()
	}
	return keys, nil
}
